"""Tests that compare the compiled path with the pure-Python one in one process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import ModuleType


@contextlib.contextmanager
def compiled_off(modules: Sequence[ModuleType]) -> Iterator[None]:
    """Each module's ``_C`` (its compiled module) set to None inside the block, as ROCKETSCOPE_PURE_PYTHON=1
    leaves it, and restored after."""
    saved = [m._C for m in modules]  # type: ignore[attr-defined]
    for m in modules:
        m._C = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, c in zip(modules, saved, strict=True):
            m._C = c  # type: ignore[attr-defined]
