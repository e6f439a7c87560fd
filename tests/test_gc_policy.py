"""broker/gc_policy.py: what a server process does to its garbage collector after start-up.

Each case runs in a child interpreter, since freezing objects or changing thresholds here would
change the test process itself.  Ground truth is the interpreter's own gc state after the call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # child interpreters (about 0.3 s each)

CHILD = r"""
import gc, json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
before = gc.get_threshold()
from rocketscope.broker.gc_policy import settle_after_start
keep = [[i] for i in range(5000)]  # start-up state that must end frozen
try:
    settle_after_start("broker")
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(0)
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def _child(value: str | None) -> tuple[dict, str]:
    env = dict(os.environ)
    env.pop("ROCKETSCOPE_GC_GEN0", None)
    if value is not None:
        env["ROCKETSCOPE_GC_GEN0"] = value
    run = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_default_freezes_start_up_objects_and_spaces_out_young_collections() -> None:
    result, log = _child(None)
    assert result["before"][0] == 700  # CPython's own default, for the comparison below
    assert result["after"][0] > 10 * result["before"][0]
    assert result["after"][1:] == result["before"][1:]
    assert result["frozen"] >= 5000  # at least the lists the child built before the call
    assert log.count("frozen out of garbage collection") == 1


def test_zero_keeps_cpythons_defaults_and_freezes_nothing() -> None:
    result, log = _child("0")
    assert result["after"] == result["before"] and result["frozen"] == 0
    assert "left at CPython's defaults" in log


def test_an_explicit_threshold_is_used() -> None:
    result, _ = _child("12345")
    assert result["after"][0] == 12345


def test_a_bad_value_is_a_clear_error_naming_the_variable() -> None:
    for bad in ("lots", "-5"):
        result, _ = _child(bad)
        assert "ROCKETSCOPE_GC_GEN0" in result["error"] and bad in result["error"]
