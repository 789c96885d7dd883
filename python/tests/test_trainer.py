"""optjit under transformers' Trainer, which makes the optimizer itself from a name
(``optim="adamw_torch"``, ``"adamw_bnb_8bit"``, ``"adamw_torch_4bit"``, ...): one line
(``optjit.torch.install()``, ``optjit.bitsandbytes.install()``, ``optjit.torchao.install()``)
before it makes the Trainer step with optjit, with the losses and parameters of the library's
own optimizer, and checkpoints that either library resumes."""
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")  # ./dev.sh test installs it

import optjit.bitsandbytes as obnb
import optjit.torch as ot
import optjit.torchao as otao

STEPS = 4
# optim name -> (its installer, the optimizer class transformers makes, how far the parameters
# may end from the library's own after STEPS steps)
CASES = {
    "adamw_torch": (ot, "AdamW", 1e-6),  # torch's formulas: f32 rounding only
    "adamw_torch_fused": (ot, "AdamW", 1e-6),
    "sgd": (ot, "SGD", 1e-6),
    "rmsprop": (ot, "RMSprop", 1e-5),  # (as rmsprop_bnb_8bit below: measured 1.5e-6)
    "adamw_bnb_8bit": (obnb, "AdamW", 1e-6),  # bitsandbytes' codes bit for bit
    "paged_adamw_8bit": (obnb, "AdamW", 1e-6),  # (is_paged=True: on the CPU, unpaged in both)
    "lion_8bit": (obnb, "Lion", 1e-6),
    # (as RMSprop below; measured 6.0e-7 with 8-bit state, 1.9e-6 before optjit fused as
    # torch does)
    "ademamix_8bit": (obnb, "AdEMAMix", 1e-5),
    "paged_ademamix_32bit": (obnb, "AdEMAMix", 1e-6),
    # RMSprop divides by the root of a small second moment: torch's float32 square root (which
    # bitsandbytes' kernels take), an ulp off for one input in five, moves a parameter apart by
    # up to a few 1e-6 (measured 1.4e-6, 2.4e-6 before optjit fused as torch does;
    # test_dropins.py checks it is no less accurate against the float64 reference)
    "rmsprop_bnb_8bit": (obnb, "RMSprop", 1e-5),
    "adamw_torch_4bit": (otao, "AdamW4bit", 1e-6),  # block_size=256 (transformers' default)
    # optjit's 8-bit codes are bitsandbytes' table's, a code from torchao's now and then: a
    # parameter that met one in its second moment moves by up to a step (lr 1e-3; measured
    # 7.6e-4), as test_dropins.py bounds torchao's classes
    "adamw_torch_8bit": (otao, "AdamW8bit", 1e-3),
}


def train(tmp_path, optim, install, steps=STEPS, resume=None, out="out"):
    """A 1-layer GPT-2 (vocabulary 128, width 32) for `steps` steps of 4 sequences on the CPU,
    checkpointed every 2 steps; its losses, parameters and optimizer."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128,
                                     n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 128, (16, 16), generator=g)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / out), optim=optim, max_steps=steps,
        per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1, save_steps=2,
        use_cpu=True, report_to=[], dataloader_num_workers=0, seed=0, data_seed=0,
        disable_tqdm=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with (install.install() if install is not None else _nothing()):
            trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
            trainer.train(resume_from_checkpoint=resume)
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # (accelerate's wrapper)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    opt.grad_norms = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
    return losses, [p.detach().clone() for p in model.parameters()], opt


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.parametrize("optim", list(CASES))
def test_the_trainer_steps_with_optjit_after_one_install_line(tmp_path, optim):
    """The Trainer's own optimizer, then with the install line: optjit's class, the same
    losses (to 1e-5) and parameters (within the case's bound); the Trainer's clip (max_grad_norm
    1) deferred into optjit's step, with the same gradient norms logged; then the library's own
    Trainer resumes optjit's checkpoint after 2 steps, and optjit resumes the library's, each
    ending where the library's uninterrupted run ends."""
    install, name, bound = CASES[optim]
    theirs, want, their_opt = train(tmp_path, optim, None, out="theirs")
    ours, got, our_opt = train(tmp_path, optim, install, out="ours")
    assert type(our_opt) is getattr(install, name), type(our_opt)
    assert type(their_opt).__module__.split(".")[0] in ("torch", "bitsandbytes", "torchao")
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert "optjit_deferred_clip" in our_opt.pipeline
    assert len(our_opt.grad_norms) == STEPS
    assert our_opt.grad_norms == pytest.approx(their_opt.grad_norms, rel=1e-4)
    assert our_opt.grad_norms[0] == their_opt.grad_norms[0]  # (the same model: torch's norm)
    for a, b in zip(got, want):
        assert (a - b).abs().max().item() <= bound
    for first, then, folder in ((install, None, "ours"), (None, install, "theirs")):
        _, resumed, _ = train(tmp_path, optim, then, resume=str(tmp_path / folder / "checkpoint-2"),
                              out=folder + "-resumed")
        for a, b in zip(resumed, want):
            assert (a - b).abs().max().item() <= bound, (folder, (a - b).abs().max().item())
