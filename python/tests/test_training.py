"""Real training runs (examples/torch_training.py, shortened): a character transformer on the
standard library's own source and an MLP on scikit-learn's digits, each with torch's AdamW +
clip_grad_norm_ and with optjit.torch.AdamW with the clip fused: the logged losses agree to 1%."""
import importlib.util
import os

import pytest
import torch

pytest.importorskip("sklearn", reason="pip install scikit-learn (./dev.sh test installs it)")

_path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_training.py")
_spec = importlib.util.spec_from_file_location("torch_training", _path)
training = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(training)


@pytest.mark.parametrize("task", ["char_task", "digits_task"])
def test_training_curves_agree_with_torch(task):
    torch.set_num_threads(2)
    ref, ours, worst = training.compare(task, getattr(training, task), 100, 10)
    assert len(ref) == len(ours) == 10
    assert ref[-1][1] < 0.8 * ref[0][1]  # it really trains
    assert worst <= 0.01


@pytest.mark.parametrize("state_format", ["bf16", "bf16_sr", "8bit"])
@pytest.mark.parametrize("task", ["char_task", "digits_task"])
def test_bf16_state_trains_as_well_as_fp32_state(task, state_format):
    """AdamW with its state stored in bf16 (rounded to nearest, or stochastically) or in 8 bits
    per element (bitsandbytes' blockwise dynamic quantization): the final
    logged loss is within 2% of torch's AdamW with fp32 state on the same run."""
    torch.set_num_threads(2)
    make, batches, loss_fn = getattr(training, task)(100)
    ref, _ = training.train(make, batches, loss_fn, False, 10)
    ours, _ = training.train(make, batches, loss_fn, True, 10, state_format=state_format)
    assert ours[-1][1] < 0.8 * ours[0][1]  # it trains
    assert abs(ours[-1][1] - ref[-1][1]) <= 0.02 * ref[-1][1], (ref[-1], ours[-1])
