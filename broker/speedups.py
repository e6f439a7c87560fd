"""Which implementation of the send path's byte layouts runs: the compiled one or the pure-Python one.

broker/fastpath.c does, in C, the per-request byte work of a remoting send that the session-15
profile found spread over Python layers (issue 20): the JSON header of a request frame into its
fields, a send header's fields, the properties string, a SEND_BATCH_MESSAGE body, the answer frame,
and the head of a commit-log record.  Each of its functions covers the common case only and returns
None otherwise; the Python implementation in codec.py, broker_handlers.py and record.py then runs,
so both give the same bytes, values and errors (tests/test_fastpath_equivalence.py runs both).

``pip install .`` (and ``-e .``, which ``make test`` runs) compiles it; a failed compile fails the
install (setup.py), so it is never missing by accident.  ``ROCKETSCOPE_PURE_PYTHON=1`` in the
environment selects the Python implementation (read once, at import): for comparison runs
(bench/send_path_micro.py) and for a platform without a C compiler, with `optional=True` there.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_ENV = "ROCKETSCOPE_PURE_PYTHON"


def pure_python_requested() -> bool:
    """Whether ``ROCKETSCOPE_PURE_PYTHON`` asks for the Python implementations: the one switch for every
    compiled module (this one's fastpath and broker/dledger/raft_codec.py's raftpath)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _load() -> ModuleType | None:
    if pure_python_requested():
        return None
    from . import fastpath  # an ImportError here is a broken install: setup.py always builds it

    return fastpath


def _load_records() -> ModuleType | None:
    """broker/raftpath.c, for the store: its reader of commit-log records also dispatches them from their bytes
    (``dispatch_records``, a DLedger follower's committed records); None on the pure-Python path."""
    if pure_python_requested():
        return None
    from . import raftpath  # built with fastpath by setup.py

    return raftpath


compiled: ModuleType | None = _load()
records: ModuleType | None = _load_records()
IMPLEMENTATION = "c" if compiled is not None else "python"
