"""A pytest plugin: a test that starts a process must be marked ``e2e``.

Why: ``make test-unit`` runs ``pytest -m "not e2e"`` as the quick, pure run. A test that
starts a broker, a JVM (Spark), Chromium or any other subprocess and forgets the mark
would make that run slow and flaky without anyone noticing, so the mark is enforced
instead of remembered: every ``subprocess.Popen`` is attributed to the running test (its
fixtures' set-up included), and an unmarked test that started one fails with the command
it ran. A fixture that starts its process once for many tests (the session's SparkSession)
is named in PROCESS_FIXTURES, so every test that uses it needs the mark too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Generator
from typing import Any

import pytest

PROCESS_FIXTURES = frozenset({"spark"})
_running: list[pytest.Item] = []
_started: dict[str, list[str]] = {}
_original_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]


def _recording_execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
    if _running:
        command = args if isinstance(args, str | bytes) else " ".join(str(a) for a in args)
        _started.setdefault(_running[-1].nodeid, []).append(str(command)[:200])
    return _original_execute_child(self, args, *rest, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen._execute_child = _recording_execute_child  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    subprocess.Popen._execute_child = _original_execute_child  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    started = _started.get(item.nodeid) or [f"fixture {name}" for name in sorted(
        PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())))]
    if report.when == "call" and started and item.get_closest_marker("e2e") is None and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started a process but is not marked e2e "
                           f"(add `pytestmark = pytest.mark.e2e` or @pytest.mark.e2e): {started[0]}")
    return report
