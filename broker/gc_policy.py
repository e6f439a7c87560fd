"""The garbage collector's settings in a server process once it has started.

Why: a broker's steady state allocates many short-lived container objects per message (request
frames, dicts of header fields, futures, records) that reference counting frees without help, yet
each 700 net allocations (CPython's default generation-0 threshold) start a collection, and every
tenth of those walks generation 1, every hundredth the whole heap, including the tens of thousands
of long-lived objects that start-up created (modules, protobuf descriptors, configuration,
topic tables).  Session 20's profiles of a DLedger leader under single sends showed the collector
at ~10 % of the busy samples (docs/BENCHMARKS.md, "DLedger with a compiled Raft codec (session 20)").

So after start-up the process collects once, moves every surviving object into the permanent
generation (``gc.freeze``: later collections never walk them) and raises the generation-0
threshold so collections run less often; cycles are still found, only later.  The threshold comes
from ``ROCKETSCOPE_GC_GEN0`` (default :data:`DEFAULT_GEN0`; ``0`` keeps CPython's defaults and skips
the freeze, which is how the A/B of the setting is run: docs/BENCHMARKS.md "Garbage collection
after start-up (session 20)").  It is a process setting, not a broker.conf key, because one process
may hold several brokers (``rocketscope container``); ``rocketscope broker`` and ``container`` apply it
(the name server and the controllers allocate little per message and keep CPython's defaults).
"""

from __future__ import annotations

import gc
import logging
import os

log = logging.getLogger(__name__)

GEN0_ENV = "ROCKETSCOPE_GC_GEN0"
DEFAULT_GEN0 = 50_000
"""Net container allocations between generation-0 collections after start-up (CPython's default is 700)."""


def gen0_threshold() -> int:
    """The configured threshold; a value that is not a whole number is a clear error, not a silent default."""
    raw = os.environ.get(GEN0_ENV, "").strip()
    if not raw:
        return DEFAULT_GEN0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{GEN0_ENV} must be a whole number of allocations (0 keeps CPython's defaults), "
                         f"got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{GEN0_ENV} must be 0 or more, got {value}")
    return value


def settle_after_start(process: str) -> None:
    """Freeze what start-up built and space collections out (see the module's docstring); one INFO line."""
    gen0 = gen0_threshold()
    if gen0 == 0:
        log.info("%s: garbage collector left at CPython's defaults (%s=0)", process, GEN0_ENV)
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, gen1, gen2)
    log.info("%s: %d start-up objects frozen out of garbage collection; generation-0 threshold %d",
             process, gc.get_freeze_count(), gen0)
