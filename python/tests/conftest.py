"""The suite's one rule beyond its tests: nothing in it is skipped. Every test here needs only
what `./dev.sh test` installs, so a skip (pytest.importorskip of a package that went missing, a
skip mark) would be an assertion that silently stopped running: the run fails, naming each
skipped test and its reason. The JAX test was skipped this way on every run until jax joined
dev.sh's packages."""

import pytest
import torch

_skipped = []


@pytest.fixture
def correctly_rounded_sqrt(monkeypatch):
    """torch's float32 square roots rounded correctly (the float64 root rounded once), as
    optjit's are on every backend: torch's CPU sqrt is an ulp off for one random input in five
    (torch 2.15), so a float32 comparison to the bit with torch, or with bitsandbytes' torch
    kernels, needs this. Such a comparison also needs torch's kernels to fuse add(alpha=),
    addcmul and lerp into fma, as AVX2 and AVX-512 ones do (ATEN_CPU_CAPABILITY=default's do
    not): elsewhere the test is skipped, which fails the run naming why (above)."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        pytest.skip(f"torch's {capability} kernels do not fuse")
    plain, inplace = torch.Tensor.sqrt, torch.Tensor.sqrt_

    def sqrt(self):
        return plain(self.double()).to(self.dtype) if self.dtype == torch.float32 else plain(self)

    def sqrt_(self):
        return self.copy_(sqrt(self)) if self.dtype == torch.float32 else inplace(self)

    monkeypatch.setattr(torch.Tensor, "sqrt", sqrt)
    monkeypatch.setattr(torch.Tensor, "sqrt_", sqrt_)


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    if _skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _skipped:
        terminalreporter.write_line(
            f"{len(_skipped)} skipped, and this suite skips nothing (./dev.sh test installs every "
            "package it needs):", red=True)
        for s in _skipped:
            terminalreporter.write_line(f"  {s}", red=True)
