"""The nemesis: a schedule of faults, generated from a seed (same seed, same schedule), and its executor.

Fault kinds (``KINDS``):

* ``kill``      kill -9 of the target, ``hold`` seconds down, restart with the same store;
* ``restart``   graceful stop (SIGTERM) and start again after ``hold``;
* ``pause``     SIGSTOP for ``hold`` seconds, then SIGCONT (alive but silent);
* ``isolate``   every link of the target cut both ways for ``hold`` seconds;
* ``oneway``    the target hears its peers but nothing it sends reaches them;
* ``slow``      every link of the target delayed by ``delay_ms`` both ways for ``hold`` seconds;
* ``preferred`` DLedger only: kill -9 of the preferred leader (n0) while it leads, restart
  after ``hold``, and wait until it has taken leadership back.

Targets: ``writer`` (the leader or master when the fault starts) or ``follower`` (another
node).  Master/Slave: isolation, one-way cuts and delays act on the slave's HA link, the
only link there is.
"""

from __future__ import annotations

import json
import os
import random
import threading
from dataclasses import asdict, dataclass
from typing import Any

from chaos.harness import ChaosCluster
from chaos.history import History

KINDS = ("kill", "restart", "pause", "isolate", "oneway", "slow", "preferred")
KINDS_BY_MODE = {"dledger": KINDS, "controller": KINDS[:-1], "masterslave": KINDS[:-1]}


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str = "writer"
    hold: float = 3.0  # seconds the fault lasts
    settle: float = 3.0  # seconds of normal operation after the cluster settled, before the next fault
    delay_ms: int = 0  # for ``slow``

    def describe(self) -> str:
        extra = f" +{self.delay_ms}ms" if self.kind == "slow" else ""
        return f"{self.kind}({self.target}{extra}) hold {self.hold:g}s settle {self.settle:g}s"


def schedule_from_seed(seed: int, mode: str, count: int, kinds: tuple[str, ...] | None = None) -> list[Fault]:
    """``count`` faults drawn with ``random.Random(seed)``: the same seed gives the same schedule."""
    rng = random.Random(seed)
    allowed = kinds or KINDS_BY_MODE[mode]
    out = []
    for _ in range(count):
        kind = rng.choice(allowed)
        target = "writer" if kind == "preferred" else rng.choice(("writer", "writer", "follower"))
        out.append(Fault(kind, target, hold=round(rng.uniform(1.0, 5.0), 1), settle=round(rng.uniform(2.0, 4.0), 1),
                         delay_ms=rng.choice((100, 200, 500)) if kind == "slow" else 0))
    return out


def schedule_json(faults: list[Fault]) -> str:
    return json.dumps([asdict(f) for f in faults])


def schedule_load(text: str) -> list[Fault]:
    return [Fault(**d) for d in json.loads(text)]


class Nemesis:
    """Runs a schedule against a cluster, recording ``invoke``/``ok`` for each fault in the history."""

    def __init__(self, cc: ChaosCluster, h: History, stop: threading.Event | None = None) -> None:
        self.cc = cc
        self.h = h
        self.stop = stop or threading.Event()

    def _hold(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def _target(self, fault: Fault) -> int:
        cc = self.cc
        if fault.kind == "preferred":
            return cc.preferred_leader()
        w = cc.wait_writer(timeout=60)
        if fault.target == "writer":
            return w
        return next(i for i in range(len(cc.nodes)) if i != w)

    def run_one(self, n: int, fault: Fault) -> dict[str, Any]:
        cc = self.cc
        if fault.kind == "preferred":  # it must lead before it can come back
            cc.wait_settled(timeout=90)
            self.h.add("info", "nemesis-wait", "nemesis", n=n, what="preferred leader leads")
            from chaos.harness import wait_for
            wait_for(lambda: cc.writer() == cc.preferred_leader(), timeout=90, what="the preferred leader leading")
        i = self._target(fault)
        # ``access``: the node the clients hold their connections to (a paused access point holds them for
        # the pause, whatever the cluster does); ``load``: the 1-minute load average, as windows stretch with it
        start = self.h.add("invoke", "nemesis", "nemesis", n=n, fault=asdict(fault), node=i,
                           writer=cc.writer(), access=cc.access_point(), load=round(os.getloadavg()[0], 2))
        if fault.kind in ("kill", "preferred"):
            cc.kill(i)
            self._hold(fault.hold)
            cc.restart(i)
        elif fault.kind == "restart":
            cc.stop_node(i)
            self._hold(fault.hold)
            cc.restart(i)
        elif fault.kind == "pause":
            cc.pause(i, True)
            self._hold(fault.hold)
            cc.pause(i, False)
        elif fault.kind == "isolate":
            cc.isolate(i, True)
            self._hold(fault.hold)
            cc.isolate(i, False)
        elif fault.kind == "oneway":
            cc.cut_outgoing(i, True)
            self._hold(fault.hold)
            cc.cut_outgoing(i, False)
        elif fault.kind == "slow":
            cc.slow(i, fault.delay_ms / 1000)
            self._hold(fault.hold)
            cc.slow(i, 0.0)
        else:
            raise ValueError(f"unknown fault kind {fault.kind}")
        healed = self.h.add("ok", "nemesis", "nemesis", n=n, node=i)
        if fault.kind == "preferred":
            from chaos.harness import wait_for
            wait_for(lambda: cc.writer() == i, timeout=90, what="the preferred leader taking leadership back")
            self.h.add("info", "nemesis-wait", "nemesis", n=n, what="preferred leader back")
        cc.wait_settled(timeout=90)
        settled = self.h.add("info", "nemesis-settled", "nemesis", n=n)
        self._hold(fault.settle)
        return {"n": n, "start": start["t"], "healed": healed["t"], "settled": settled["t"]}

    def run(self, faults: list[Fault]) -> list[dict[str, Any]]:
        return [self.run_one(n, f) for n, f in enumerate(faults) if not self.stop.is_set()]
