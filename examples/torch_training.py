#!/usr/bin/env python3
"""Two real training runs, each once with torch.optim.AdamW + clip_grad_norm_ and once with
optjit.torch.AdamW with the clip fused into the step, from the same initial weights and the same
batches:

- a small character-level transformer on text that ships with Python itself (the standard
  library's own source files);
- an MLP on scikit-learn's bundled handwritten digits.

Prints the loss of both at every logged step (the mean over the steps since the last log, as a
training loop logs it), their largest relative difference and the step times, and with --plot
writes both loss curves to a PNG. Exits 1 if the curves differ by more than 1% anywhere.

    PYTHONPATH=build/python python3 examples/torch_training.py --plot docs/training.png
"""
import argparse
import os
import sysconfig
import time

import torch

import optjit.torch as ot


def stdlib_text(chars):
    """Source files of the standard library, in a fixed order, up to `chars` characters."""
    root = sysconfig.get_paths()["stdlib"]
    text = []
    for name in ["textwrap.py", "string.py", "fractions.py", "heapq.py", "bisect.py", "shlex.py",
                 "difflib.py", "calendar.py"]:
        path = os.path.join(root, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                text.append(f.read())
    text = "\n".join(text)[:chars]
    if len(text) < 1000:
        raise SystemExit(f"too little standard-library source found under {root}")
    return text


class CharTransformer(torch.nn.Module):
    def __init__(self, vocab, d=64, layers=2, heads=4, context=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(context, d))
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, x):
        h = self.embed(x) + self.pos[: x.shape[1]]
        return self.head(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))


def char_task(steps, batch=16, context=64):
    text = stdlib_text(200_000)
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    g = torch.Generator().manual_seed(1)
    starts = torch.randint(0, len(data) - context - 1, (steps, batch), generator=g)

    def batches():
        for k in range(steps):
            idx = starts[k][:, None] + torch.arange(context + 1)[None, :]
            seq = data[idx]
            yield seq[:, :-1], seq[:, 1:]

    def loss_fn(model, x, y):
        return torch.nn.functional.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))

    return (lambda: CharTransformer(len(chars), context=context)), batches, loss_fn


def digits_task(steps, batch=128):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(2)
    order = [torch.randint(0, len(x), (batch,), generator=g) for _ in range(steps)]

    def batches():
        for k in range(steps):
            yield x[order[k]], y[order[k]]

    def make():
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                   torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                   torch.nn.Linear(128, 10))

    def loss_fn(model, xb, yb):
        return torch.nn.functional.cross_entropy(model(xb), yb)

    return make, batches, loss_fn


def train(make, batches, loss_fn, use_optjit, log_every, lr=3e-3, state_format=None):
    torch.manual_seed(0)
    model = make()
    if use_optjit:
        opt = ot.AdamW(model.parameters(), lr=lr, weight_decay=0.01, max_grad_norm=1.0,
                       state_format=state_format)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses, window, step_time = [], [], 0.0
    for k, (xb, yb) in enumerate(batches()):
        loss = loss_fn(model, xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t0 = time.perf_counter()
        if not use_optjit:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step_time += time.perf_counter() - t0
        # What a training loop logs: the mean loss of the steps since the last log.
        window.append(loss.item())
        if (k + 1) % log_every == 0:
            losses.append((k + 1, sum(window) / len(window)))
            window = []
    return losses, step_time


def compare(name, task, steps, log_every):
    make, batches, loss_fn = task(steps)
    ref, t_ref = train(make, batches, loss_fn, False, log_every)
    ours, t_ours = train(make, batches, loss_fn, True, log_every)
    worst = max(abs(a[1] - b[1]) / abs(a[1]) for a, b in zip(ref, ours))
    print(f"{name}: {steps} steps; mean loss of every {log_every} steps (torch / optjit):")
    for (k, a), (_, b) in zip(ref, ours):
        print(f"  step {k:4d}  {a:.5f}  {b:.5f}")
    print(f"  largest relative difference {100 * worst:.3f}%; optimizer step "
          f"{1e3 * t_ref / steps:.2f} ms (torch AdamW + clip_grad_norm_) against "
          f"{1e3 * t_ours / steps:.2f} ms (optjit.torch.AdamW, clip fused)")
    return ref, ours, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", help="write both loss curves to this PNG")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    results = [("character transformer on the standard library's source", *compare(
                   "char transformer", char_task, a.steps, 10)),
               ("MLP on scikit-learn's digits", *compare("digits MLP", digits_task, a.steps, 10))]
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, (title, ref, ours, worst) in zip(axes, results):
            ax.plot([k for k, _ in ref], [v for _, v in ref], label="torch.optim.AdamW + clip_grad_norm_")
            ax.plot([k for k, _ in ours], [v for _, v in ours], "--",
                    label="optjit.torch.AdamW(max_grad_norm=1.0)")
            ax.set_title(f"{title}\n(largest difference {100 * worst:.2f}%)", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("training loss")
            ax.legend(fontsize=8)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(a.plot)), exist_ok=True)
        fig.savefig(a.plot, dpi=90)
        print(f"wrote {a.plot}")
    return 0 if all(r[3] <= 0.01 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
