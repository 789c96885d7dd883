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
