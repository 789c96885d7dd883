"""The suite's one rule beyond its tests: nothing in it is skipped. Every test here needs only
what `./dev.sh test` installs, so a skip (pytest.importorskip of a package that went missing, a
skip mark) would be an assertion that silently stopped running: the run fails, naming each
skipped test and its reason. The JAX test was skipped this way on every run until jax joined
dev.sh's packages."""

import pytest

_skipped = []


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
