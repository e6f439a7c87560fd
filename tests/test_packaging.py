"""The distribution maps every folder onto the rocketscope namespace, installed or editable."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.e2e

PARTS = ["rocketscope", "rocketscope.broker", "rocketscope.telemetry", "rocketscope.trace", "rocketscope.spark",
         "rocketscope.dashboards"]

IMPORT_ALL = """
import importlib, pkgutil, sys, trace
assert 'site-packages' not in trace.__file__ and 'rocketscope' not in trace.__file__, trace.__file__
assert hasattr(trace, 'Trace'), 'the standard library trace module is shadowed'
import rocketscope
parts = {parts!r}
seen = []
for name in parts:
    mod = importlib.import_module(name)
    seen.append(name)
    for info in pkgutil.walk_packages(mod.__path__, name + '.'):
        if '.pages' in info.name or info.name.endswith('__main__'):
            continue
        importlib.import_module(info.name)
        seen.append(info.name)
print(len(seen), rocketscope.__file__)
"""


def _run_isolated(code: str, extra_path: list[str], cwd: Path, *, editable_finder: bool) -> str:
    """Run ``code`` in a fresh interpreter: no cwd on sys.path; the editable finder only when asked."""
    site = sysconfig.get_paths()["purelib"]
    boot = f"import sys; sys.path[:0] = {extra_path!r}; sys.path.append({site!r})\n"
    flags = ["-I"] if editable_finder else ["-I", "-S"]  # -S skips site-packages' .pth files (the finder)
    res = subprocess.run([sys.executable, *flags, "-c", boot + code], capture_output=True, text=True, cwd=cwd,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_wheel_install_imports_every_part(tmp_path: Path) -> None:
    wheel_dir = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheel_dir), str(REPO)], check=True, capture_output=True, timeout=240)
    (wheel,) = wheel_dir.glob("rocketscope-*.whl")
    target = tmp_path / "installed"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
        names = zf.namelist()
    assert "rocketscope/trace/codec.py" in names or any(n.startswith("rocketscope/trace/") for n in names)
    assert not any(n.startswith("trace/") for n in names), "a top-level 'trace' package would shadow the stdlib"
    out = _run_isolated(IMPORT_ALL.format(parts=PARTS), [str(target)], tmp_path, editable_finder=False)
    assert str(target) in out


def test_editable_install_imports_every_part(tmp_path: Path) -> None:
    out = _run_isolated(IMPORT_ALL.format(parts=PARTS), [], tmp_path, editable_finder=True)
    assert str(REPO) in out
