"""The chaos harness on fixed short schedules: every fault kind, in DLedger, controller and Master/Slave mode.

Each test starts the mode's processes (tests/chaos/harness.py), runs the official-client
workload (tests/chaos/workload.py) through one schedule and checks the whole history at
the end (tests/chaos/checker.py).  The invariants are asserted strictly: no acknowledged
message lost, nothing delivered that was never sent or was rolled back, FIFO order within
each message group, no delayed message early, and the replicas' commit logs equal up to the
committed point.

What clients may still notice is bounded per fault kind by ``TOLERATED`` below, with the
reason for each figure; ``KNOWN_DEFECTS`` lists the invariant failures the broker still has
today (each one printed with its count, so the run shows whether it happened).  A failing
test prints the seed, the schedule and the command that replays it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.nemesis import Fault
from chaos.run import report, run

# In make test (issue 15 asks for it): about 97, 67 and 43 s per mode at load ~6 (session 11).  Session 10
# kept them `long` after two INVALID runs in ten; both causes are fixed (STALL_S below the PushConsumer's
# redelivery; the controller-mode double hand-out of a demoted master's long poll, tests/test_pop_demotion.py),
# and so is what the controller schedule found next (timer loop ended by a cancelled put,
# tests/test_controller_demotion_waiters.py).
pytestmark = [pytest.mark.e2e]

F = Fault
SCHEDULES: dict[str, list[Fault]] = {  # every kind at least once, every mode
    "dledger": [F("kill", "writer", 1.5, 1), F("pause", "writer", 2, 1), F("isolate", "writer", 2, 1),
                F("oneway", "writer", 2, 1), F("slow", "writer", 2, 1, delay_ms=200), F("preferred", "writer", 1.5, 1)],
    "controller": [F("kill", "writer", 1.5, 1), F("pause", "writer", 2, 1), F("isolate", "writer", 2, 1),
                   F("oneway", "writer", 2, 1)],
    "masterslave": [F("kill", "follower", 1.5, 1), F("isolate", "follower", 1.5, 1),
                    F("slow", "follower", 1.5, 1, delay_ms=200), F("restart", "writer", 1, 1)],
}

# Invariants the broker does not keep yet: reported with their counts, not failed on.  Empty since
# the three that issue 15's harness found were fixed (each has its regression test):
# - "tx_duplicates" (acknowledged messages handed out again after a leader change): POP state goes
#   through the replicated log and an ack is answered once replicated (broker/pop_log.py;
#   tests/test_failover_pop_state.py);
# - "fifo_stalled" (a SimpleConsumer fell hundreds of messages behind in FIFO groups): one receive
#   hands out a run of a message group (broker/pop.py; tests/test_failover_pop_state.py);
# - "tx_unchecked" (open transactions never checked back after a leader change): Telemetry streams
#   follow the writer, and a producer that lost its stream gets routes that make it open one
#   (broker/forwarding.py; tests/test_failover_checkback.py).
KNOWN_DEFECTS: dict[str, str] = {}
# Modes where acknowledged delayed messages may still be lost (reported, not failed on).  Controller
# mode lost them around a master change until the disk-backed timer (seen at 22816e0: a delivery
# written but never replicated was marked done); since bd33bb6 a new writer re-checks what is due
# against its log and nothing unconfirmed counts as delivered (broker/timer.py): 0 lost in 3 runs at
# 047b713, one record per delayed message on every replica.
# Delayed messages are written at most 1.9 s after their time through the faults; the lateness the
# checker prints is the time to the consumer, which normal messages share (replication and POP).
KNOWN_LOST_DELAYED: set[str] = set()

# Client-visible send failures (a send that raised after the official client's 3 attempts)
# tolerated per fault, by mode and fault kind, and why.  None means "not bounded here".
TOLERATED: dict[str, dict[str, tuple[int | None, str]]] = {
    "dledger": {k: (0, "followers forward to the writer and wait for it within the deadline") for k in
                ("kill", "pause", "isolate", "oneway", "slow", "restart", "preferred")},
    # 0 everywhere measured at 8cc5544 (forwarding that waits for the writer) in 2 runs of each schedule.
    "controller": {k: (0, "a send at a slave or a deposed master is forwarded to the master and waits for it")
                   for k in ("kill", "pause", "isolate", "oneway", "slow", "restart")},
    "masterslave": {
        "kill": (None, "SYNC_MASTER without its slave answers SLAVE_PERSISTENCE_TIMEOUT until the slave is back"),
        "pause": (None, "the only writer is paused: every send in the pause fails or times out"),
        "isolate": (None, "no slave connected: SLAVE_PERSISTENCE_TIMEOUT"),
        "oneway": (None, "the slave's acks do not arrive: SLAVE_PERSISTENCE_TIMEOUT"),
        "slow": (0, "200 ms on the HA link stays inside slaveTimeout"),
        "restart": (None, "the only writer is down until it is started again (no automatic failover)"),
    },
}

# The longest window with no successful send tolerated per fault.  Measured at 8cc5544:
# DLedger at most 0.73 s (load average ~20) and 4.3 s (preferred-leader return, load average
# ~40); session 11, controller mode with the product's default timing (the harness sets no timing
# key since then): kills 0.79-0.98 s, pauses 0.90-2.34 s (a paused master holds the clients
# connected to it until it runs again), isolations 0.18-0.62 s at load ~6.
# The bounds leave room for a loaded CI machine and still catch outages like issue 15's 50 s;
# bench/chaos_bench.py gives the real figures.
NO_SEND_LIMIT: dict[str, tuple[float | None, str]] = {
    "dledger": (10.0, "election within a second, followers forward to the new leader"),
    "controller": (10.0, "a broker deemed dead after 800 ms without a heartbeat, then election and forwarding"),
    "masterslave": (None, "a SYNC_MASTER without its slave, or a master that is down, accepts no send: by design"),
}


@pytest.mark.timeout(900)  # 43-97 s each at load ~6 (session 11); a loaded machine can take several times that
@pytest.mark.parametrize("mode", list(SCHEDULES))
def test_chaos_schedule(mode: str, tmp_path: Path) -> None:
    result = run(mode, SCHEDULES[mode], seed=15, root=tmp_path / mode, drain_timeout=120.0, warmup_acks=40)
    text = report(result)
    print(text)
    violations = result["violations"]
    for name, why in KNOWN_DEFECTS.items():
        if name in violations:
            print(f"known defect {name} ({why}): {sum(map(len, violations[name].values()))} keys")
    if mode in KNOWN_LOST_DELAYED and "lost" in violations:
        delayed = {g: [k for k in keys if k.startswith("d-")] for g, keys in violations["lost"].items()}
        print(f"known defect: acknowledged delayed messages not delivered in controller mode: "
              f"{ {g: len(k) for g, k in delayed.items()} }")
        violations["lost"] = {g: rest for g, keys in violations["lost"].items()
                              if (rest := [k for k in keys if not k.startswith("d-")])}
        if not violations["lost"]:
            del violations["lost"]
    hard = {k: v for k, v in violations.items() if k not in KNOWN_DEFECTS}
    assert not hard, f"invariants violated:\n{text}"
    for f in result["faults"]:
        limit, why = TOLERATED[mode][f["fault"]["kind"]]
        if limit is not None:
            assert f["send_failures"] <= limit, (
                f"fault {f['n']} {f['fault']['kind']}: {f['send_failures']} send failures, tolerated {limit} "
                f"({why})\n{text}")
        no_send, why = NO_SEND_LIMIT[mode]
        if no_send is not None:
            assert f["max_no_send_s"] <= no_send, (
                f"fault {f['n']} {f['fault']['kind']}: no successful send for {f['max_no_send_s']} s, tolerated "
                f"{no_send} s ({why})\n{text}")
