"""Random call sequences on the low-level optjit.Engine, as careless code would make them:
random shapes, dtypes, layouts and pipelines; steps with right and wrong gradients; states
bound, rebound and dropped; parameters rebound; hyperparameters set to nonsense; checkpoints
saved and loaded across pipelines; arrays the caller lets go of. Whatever a call does, it
either works or raises a one-line optjit.Error (or the binding's TypeError for a value of
another type), and the process survives: this found an engine writing into arrays numpy had
freed. Seeded, so a failure reproduces."""
import random

import pytest

import optjit

np = pytest.importorskip("numpy")

PIPELINES = [
    "sgd(lr=0.1)", "sgd(lr=0.1, momentum=0.9)", "adamw(lr=1e-2)",
    'adamw(lr=1e-2, state_format="8bit")', 'adamw(lr=1e-2, state_format="4bit")',
    "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))", "chain(grad_scaler(), adam(lr=1e-3))",
    "lamb(lr=1e-3)", "rprop(lr=0.01)", "asgd(lr=0.01)", 'adamw(lr=1e-3, state_format="bf16")',
    "nadam(lr=1e-3)", "adagrad(lr=0.1)", "lion(lr=1e-4)",
]
SHAPES = [(), (0,), (1,), (7,), (300,), (5000,), (70000,), (17, 33), (64, 64), (3, 0)]
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8]
STORAGE = {"f32": np.float32, "u8": np.uint8, "bf16": np.uint16, "f16": np.float16,
           "f64": np.float64}


def _array(rng, shape, dtype=None):
    dtype = dtype or rng.choice([np.float32] * 6 + DTYPES)
    a = np.asarray(np.random.default_rng(rng.randrange(1 << 30)).standard_normal(shape)
                   * rng.choice([1, 1e-3, 1e3])).astype(dtype)
    if rng.random() < 0.05 and a.size and a.dtype.kind == "f":
        a.flat[0] = rng.choice([np.nan, np.inf, -np.inf])
    if rng.random() < 0.05 and a.ndim >= 1 and a.shape[0] > 1:
        a = a[::2]  # not contiguous
    if rng.random() < 0.03 and a.ndim == 2:
        a = a.T  # another memory order
    return a


def _sequence(rng, path):
    k = rng.randint(1, 3)
    shapes = [rng.choice(SHAPES) for _ in range(k)]
    dtype = rng.choice([np.float32] * 4 + [np.float64, np.float16])
    params = [_array(rng, s, dtype) for s in shapes]
    names = [f"p{i}" for i in range(k)] if rng.random() > 0.05 else ["p"] * k
    refusals = []

    def attempt(call):
        try:
            call()
        except optjit.Error as e:
            refusals.append(str(e))
        except TypeError:  # nanobind: an argument of another type
            pass

    engine = []
    attempt(lambda: engine.append(optjit.Engine(
        rng.choice(PIPELINES), names, params,
        grad_dtype=rng.choice([None, None, None, "f32", "bf16"]))))
    if not engine:
        return refusals
    e = engine.pop()
    if rng.random() < 0.5:
        del params[:]  # the caller lets go of its arrays (freed now: reference counting)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if op < 0.5:
            grads = [_array(rng, s, rng.choice([dtype] * 8 + DTYPES)) for s in shapes]
            attempt(lambda: e.step(grads[:-1] if rng.random() < 0.05 else grads))
        elif op < 0.6 and e.state_buffers:
            b, i = rng.choice(e.state_buffers), rng.randrange(k)
            n = e.state_elements(i, b)
            a = (np.zeros(max(0, n + rng.choice([0, 0, 0, 1, -1])),
                          STORAGE.get(e.state_storage(i, b), np.float32))
                 if rng.random() < 0.8 else _array(rng, shapes[i]))
            attempt(lambda: e.bind_state(i, b, a, adopt=rng.random() < 0.5))
        elif op < 0.7:
            i = rng.randrange(k + 1)
            attempt(lambda: e.rebind_param(
                i, _array(rng, shapes[min(i, k - 1)], rng.choice([dtype, dtype, np.float32]))))
        elif op < 0.8:
            name = rng.choice(e.hyperparameters + ["betas", "lr", "zz"])
            value = rng.choice([0.1, -1.0, float("nan"), 0.9, 1e9])
            attempt(lambda: e.set_hyper(name, [value] * rng.choice([1, 1, 2])))
        elif op < 0.88:
            attempt(lambda: (e.save if rng.random() < 0.5 else e.load)(path))
        elif op < 0.92:
            attempt(lambda: e.set_step_count(rng.choice([0, 5, -1, 2**62])))
        elif op < 0.96:
            attempt(e.initialize_state)
        else:
            assert isinstance(e.plan, str) and e.step_count >= 0 and e.bytes_per_param > 0
    return refusals


def test_random_call_sequences_work_or_refuse_with_one_line(tmp_path):
    rng = random.Random(20261124)
    refusals = []
    for _ in range(150):
        refusals += _sequence(rng, str(tmp_path / "state.safetensors"))
    assert len(refusals) > 40  # the sequences do reach the checks
    for message in refusals:
        assert message and "\n" not in message, message
        assert "bad_alloc" not in message and "internal" not in message.lower(), message
