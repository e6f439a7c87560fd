"""One simulated run per seed: a random fault schedule, invariants at every step, a final heal.

Everything random comes from ``random.Random(seed)`` (node RNG seeds included) and
nothing iterates a set or depends on the clock, so a seed replays exactly.

Every node runs the production Raft driver (broker/raft/driver.py) with simulated storage,
clock, network and fsync (tests/sim/node.py).  Time moves in ticks (each node's driver
ticker fires once per tick, with occasional skipped ticks as clock skew).  Within a tick,
``ROUNDS`` delivery rounds run: due messages are delivered, then every node's driver
writes its Readys and waits for the fsync, which completes at once or in a later round (a
crash in between loses or keeps the unsynced writes).  A message with no delay arrives in the next round,
which models a network much faster than a tick (50 ms tick, sub-millisecond LAN).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketscope.broker.raft import EventKind, Message, ProposalDropped, RaftConfig, RaftEvent, Ready, Role

from .checker import Checker, InvariantViolation
from .disk import intercept
from .network import Network
from .node import SimNode

ROUNDS = 3
FAULT_TICKS = 140
# mixed: a quarter of the seeds are chaos; chaos: all of them; dledger: mixed, on DLedger's real log files
# (tests/sim/dledger.py) on a simulated disk; pipeline: mixed, plus leaders that crash after their appends left
# and before their own fsync completed (the window broker/raft/ready.py's early_messages opens), with slow
# leader disks so that the followers' acknowledgements arrive first; lazy_commit: mixed with DLedger's lazy
# commit broadcast; dledger_lazy: dledger with it; dledger_async: dledger_lazy with appends that count once written
# (RaftConfig.sync_appends false, dLegerSyncAppends) and only the crashes that mode survives: process crashes, which
# keep what was written (the page cache outlives the process)
PROFILES = ("mixed", "chaos", "dledger", "pipeline", "lazy_commit", "dledger_lazy", "dledger_async")
DLEDGER_FAMILY = ("dledger", "dledger_lazy", "dledger_async")
LIVENESS_TICKS = 150  # after the heal: a leader and a committed proposal on every node within this (+ backlog)


class SimulationFailure(AssertionError):
    """A seed broke an invariant (or the core raised); the message carries the replay command."""

    def __init__(self, seed: int, what: str, replay: str) -> None:
        super().__init__(f"seed {seed}: {what}\n  replay: {replay}")
        self.seed = seed
        self.what = what
        self.replay = replay


def replay_command(seed: int, bugs: frozenset[str], profile: str = "mixed") -> str:
    extra = "".join(f" --bug {b}" for b in sorted(bugs))
    if profile != "mixed":
        extra += f" --profile {profile}"
    return f".venv/bin/python tests/sim/run.py --replay {seed}{extra} -v"


@dataclass
class SimStats:
    seed: int
    nodes: int
    ticks: int
    elections: int
    committed: int
    messages: int
    crashes: int
    liveness_ticks: int
    # leaders crashed while entries whose appends had left were unsynced on their own disk; of those, the ones
    # whose core had already committed such an entry on the followers' acknowledgements alone
    window_crashes: int = 0
    window_commits: int = 0


class Simulation:
    def __init__(self, seed: int, bugs: frozenset[str] = frozenset(), verbose: int = 0,
                 out: Callable[[str], None] = print, profile: str = "mixed") -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; use one of {PROFILES}")
        self.profile = profile
        self.seed = seed
        self.bugs = bugs
        self.verbose = verbose
        self.out = out
        rng = self.rng = random.Random(seed)
        n = rng.choice((3, 5))
        self.ids = [f"n{i}" for i in range(n)]
        # Per-seed fault profile: some seeds are calm, some brutal.
        # A quarter of the seeds are "chaos": crashes and partitions every few ticks.
        self.chaos = rng.random() < 0.25 or profile == "chaos"
        self.p_crash = rng.choice((0.05, 0.1, 0.2)) if self.chaos else rng.choice((0.0, 0.01, 0.02, 0.04))
        self.p_restart = rng.choice((0.05, 0.15, 0.4))
        self.p_bounce = rng.choice((0.0, 0.3, 0.8))  # restart at once (fast reboot, same term)
        self.p_moment = rng.choice((0.0, 0.05, 0.2))  # crash right at an interesting Ready
        self.p_pause = rng.choice((0.0, 0.02, 0.05))
        self.p_lose = rng.choice((0.0, 0.5, 1.0))
        self.p_partition = rng.choice((0.05, 0.1)) if self.chaos else rng.choice((0.0, 0.02, 0.05))
        self.p_heal = rng.choice((0.03, 0.1))
        self.p_propose = rng.choice((0.2, 0.5, 0.9))
        self.p_transfer = rng.choice((0.0, 0.0, 0.01, 0.03))
        self.p_tick_skip = rng.choice((0.0, 0.05))
        self.p_sync_now = rng.choice((1.0, 0.7, 0.4))
        self.lazy_commit = rng.random() < 0.5
        self.net = Network(rng)
        self.net.drop_p = rng.choice((0.0, 0.01, 0.05, 0.2))
        self.net.dup_p = rng.choice((0.0, 0.02, 0.1))
        self.net.delay_p = rng.choice((0.0, 0.05, 0.2))
        self.net.max_delay = rng.choice((2, 8, 20))
        self.net.reorder = rng.random() < 0.5
        pre_vote = rng.random() < 0.85
        check_quorum = rng.random() < 0.85
        preferred = rng.choice(self.ids) if rng.random() < 0.2 else None
        max_entries = rng.choice((1, 2, 4, 64))
        max_bytes = rng.choice((64, 1 << 20))
        max_inflight = rng.choice((1, 2, 8))
        # Timing: the recommended one, a narrow randomization (more split votes), a twitchy one.
        heartbeat, et_min, et_max = rng.choice(((2, 6, 12), (2, 6, 7), (1, 3, 5)))
        # pipeline profile: chance per round that a leader whose early appends are unsynced dies in that window,
        # and the chance per round that its fsync completes (followers' disks keep p_sync_now)
        self.p_window = 0.0
        self.p_leader_sync = self.p_sync_now
        if profile == "pipeline":
            self.p_window = rng.choice((0.05, 0.15, 0.3))
            self.p_leader_sync = rng.choice((0.15, 0.4))
            self.p_lose = rng.choice((0.5, 1.0))
        if profile == "dledger_async":
            self.p_lose = 0.0
        self.window_crashes = 0
        self.window_commits = 0
        self.nodes: dict[str, SimNode] = {}  # or tests/sim/dledger.py's DLedgerSimNode, the same interface
        self.tmp: Path | None = None
        for nid in self.ids:
            cfg = RaftConfig(
                node_id=nid, peers=tuple(self.ids), heartbeat_ticks=heartbeat, election_ticks_min=et_min,
                election_ticks_max=et_max,
                max_append_entries=max_entries, max_append_bytes=max_bytes, max_inflight=max_inflight,
                pre_vote=pre_vote, check_quorum=check_quorum, preferred_leader=preferred,
                preferred_check_ticks=10, testing_faults=bugs,
                # lazy_commit: the mixed schedule with DLedger's lazy commit broadcast (broker/raft/config.py);
                # dledger_lazy: the dledger family with it, as DLedger runs (DLedgerConfig.from_settings).  The
                # dledger family itself keeps the eager broadcast: its pinned seeds (tests/test_raft_sim_dledger.py)
                # reproduce their bugs on that schedule.
                eager_commit_broadcast=profile not in ("lazy_commit", "dledger_lazy", "dledger_async"),
                sync_appends=profile != "dledger_async",
            )
            if profile in DLEDGER_FAMILY:
                from .dledger import DLedgerSimNode  # imports the broker's store: only for this family

                if self.tmp is None:
                    # in memory when possible: the simulated disk decides what survives, not the real one
                    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
                    self.tmp = Path(tempfile.mkdtemp(prefix=f"raftsim-{seed}-", dir=shm))
                self.nodes[nid] = DLedgerSimNode(cfg, self.tmp / nid, random.Random(rng.getrandbits(32)))
            else:
                self.nodes[nid] = SimNode(cfg, self.lazy_commit)
        self.checker = Checker()
        self.now = 0
        self.proposals = 0
        self.crashes = 0
        self.liveness_ticks = 0
        self.trace(f"seed {seed}: {n} nodes{' (chaos)' if self.chaos else ''}, pre_vote={pre_vote} "
                   f"check_quorum={check_quorum} preferred={preferred} "
                   f"max_entries={max_entries} max_bytes={max_bytes} inflight={max_inflight} "
                   f"ticks={heartbeat}/{et_min}-{et_max}; "
                   f"crash={self.p_crash} moment={self.p_moment} bounce={self.p_bounce} lose={self.p_lose} "
                   f"pause={self.p_pause} partition={self.p_partition} drop={self.net.drop_p} "
                   f"dup={self.net.dup_p} delay={self.net.delay_p}x{self.net.max_delay} reorder={self.net.reorder} "
                   f"sync_now={self.p_sync_now} lazy_commit={self.lazy_commit}"
                   + (f" window={self.p_window} leader_sync={self.p_leader_sync}" if self.p_window else ""))
        for node in self.nodes.values():
            self.start(node, rng.getrandbits(32))

    def start(self, node: SimNode, rng_seed: int) -> None:
        node.start(rng_seed, self.net, self._now, _Observer(self, node))

    def _now(self) -> int:
        return self.now

    # ------------------------------------------------------------------ driver
    def run(self) -> SimStats:
        disks = [n.disk for n in self.nodes.values() if hasattr(n, "disk")]
        try:
            if disks:
                with intercept(disks):
                    return self._run()
            return self._run()
        finally:
            self.close()

    def close(self) -> None:
        """Close the members' files and remove their directory (a simulation that never ``run``s needs this too:
        a dledger-profile one makes its directory under /dev/shm when it is built)."""
        for node in self.nodes.values():
            if hasattr(node, "disk"):
                node.close()  # type: ignore[attr-defined]
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def _run(self) -> SimStats:
        try:
            for _ in range(FAULT_TICKS):
                self.tick(faults=True)
            self.heal()
            self.check_liveness()
        except SimulationFailure:
            raise
        except InvariantViolation as exc:
            raise SimulationFailure(self.seed, f"at tick {self.now}: {exc}",
                                    replay_command(self.seed, self.bugs, self.profile)) from exc
        except Exception as exc:
            where = "".join(traceback.format_exception_only(exc)).strip()
            raise SimulationFailure(self.seed, f"at tick {self.now}: core raised {where}",
                                    replay_command(self.seed, self.bugs, self.profile)) from exc
        return SimStats(self.seed, len(self.ids), self.now, self.checker.elections, self.checker.max_committed,
                        self.net.sent, self.crashes, self.liveness_ticks, self.window_crashes, self.window_commits)

    def tick(self, faults: bool) -> None:
        self.now += 1
        self.net.now = self.now
        rng = self.rng
        if faults:
            self.random_actions()
        for node in self.nodes.values():
            if node.up and node.paused_until <= self.now and not (self.p_tick_skip and rng.random() < self.p_tick_skip):
                node.clock.fire_due()  # type: ignore[union-attr]
        for _ in range(ROUNDS):
            self.deliver()
            self.process()

    def deliver(self) -> None:
        nodes = self.nodes
        verbose = self.verbose >= 2
        for m in self.net.due(self.now):
            node = nodes[m.to]
            if node.paused_until > self.now:
                self.net.requeue(m, node.paused_until)  # a stopped process reads its socket later
            elif node.up:
                if verbose:
                    self.trace(f"  {m.frm}->{m.to} {_fmt_msg(m)}")
                node.driver.step(m)  # type: ignore[union-attr]

    def process(self) -> None:
        rng = self.rng
        for node in self.nodes.values():
            if not node.up or node.paused_until > self.now:
                continue
            if node.pending_sync is not None:
                if self.p_window and node.early_unsynced:
                    if rng.random() < self.p_window:
                        self.crash_in_window(node)
                        continue
                    if rng.random() >= self.p_leader_sync:
                        continue
                    node.finish_sync()
                elif rng.random() < self.p_sync_now:
                    node.finish_sync()
                else:
                    continue
            clock = node.clock
            if clock._soon:  # type: ignore[union-attr]
                clock.run_soon()  # type: ignore[union-attr]  # the driver's pump: something kicked it
            if not node.written:
                continue
            # the driver wrote one Ready (then waits for its fsync): crash around it, or let it complete
            rd = node.written[-1]
            node.written = []
            if self.p_moment and self.interesting(rd) and rng.random() < self.p_moment:
                self.crash_at_moment(node)
            elif self.p_window and node.early_unsynced:
                pass  # its fsync waits for a later round (p_leader_sync), or a crash in the window
            elif rng.random() < self.p_sync_now:
                node.finish_sync()

    def observe_write(self, node: SimNode, rd: Ready) -> None:
        """The driver wrote ``rd`` (its fsync may be pending): check it and remember it for crash moments."""
        self.checker.after_ready(node, rd)
        node.written.append(rd)
        node.early_unsynced = rd.must_sync and any(m.entries for m in rd.early_messages)
        if self.verbose:
            for ev in rd.events:
                self.trace(f"{node.id} {_fmt_event(ev)}")
            if rd.truncate_from is not None:
                self.trace(f"{node.id} writes entries {rd.entries[0].index}..{rd.entries[-1].index} "
                           f"truncating from {rd.truncate_from}")

    @staticmethod
    def interesting(rd: Ready) -> bool:
        """A Ready after which a crash exercises a classic Raft bug (vote, election, commit)."""
        if rd.must_sync and rd.hard_state is not None:
            return True  # new term or vote
        return any(ev.kind is EventKind.ELECTION_WON or ev.kind is EventKind.COMMIT_ADVANCED for ev in rd.events)

    def crash_at_moment(self, node: SimNode) -> None:
        """Crash right before or right after an interesting Ready's fsync (FoundationDB-style "buggify")."""
        rng = self.rng
        synced = rng.random() < 0.5
        if synced and node.pending_sync is not None:
            node.finish_sync()
        lose = rng.random() < self.p_lose
        self.trace(f"CRASH {node.id} {'after' if synced else 'before'} syncing an interesting Ready"
                   f"{' (losing unsynced writes)' if lose else ''}")
        self.crash(node, lose)
        if rng.random() < self.p_bounce:
            self.restart(node)

    def crash_in_window(self, node: SimNode) -> None:
        """A leader dies after its appends left and before its own fsync of them completed."""
        rng = self.rng
        raft = node.raft
        assert raft is not None
        self.window_crashes += 1
        lost_committed = raft.is_leader and raft.log.committed >= raft.log.offset
        if lost_committed:
            self.window_commits += 1
        lose = rng.random() < self.p_lose
        self.trace(f"CRASH {node.id} with sent, unsynced entries {raft.log.offset}..{raft.log.last_index()} "
                   f"(commit {raft.log.committed}{', on the followers alone' if lost_committed else ''})"
                   f"{' losing them' if lose else ''}")
        self.crash(node, lose)
        if rng.random() < self.p_bounce:
            self.restart(node)

    def crash(self, node: SimNode, lose: bool) -> None:
        """Every crash: the checker takes the core's commit decisions first (checker.py ``crashing``)."""
        self.crashes += 1
        self.checker.crashing(node)
        node.crash(lose)

    # ------------------------------------------------------------------ faults and clients
    def random_actions(self) -> None:
        rng = self.rng
        if rng.random() < self.p_propose:
            for _ in range(rng.randint(1, 3)):
                self.propose()
        if self.p_crash and rng.random() < self.p_crash:
            up = [n for n in self.nodes.values() if n.up]
            if up:
                # Leaders are the interesting victims: half the crashes aim at one.
                leader = self.leader()
                node = leader if leader is not None and rng.random() < 0.5 else rng.choice(up)
                lose = rng.random() < self.p_lose
                self.trace(f"CRASH {node.id} ({'losing' if lose else 'keeping'} unsynced writes"
                           f"{', has some' if node.has_unsynced else ''})")
                self.crash(node, lose)
                if rng.random() < self.p_bounce:
                    self.restart(node)
        for node in self.nodes.values():
            if not node.up and rng.random() < self.p_restart:
                self.restart(node)
        if self.p_pause and rng.random() < self.p_pause:
            # SIGSTOP/SIGCONT (Jepsen's hammer-time), usually on the leader: it wakes up stale.
            leader = self.leader()
            node = leader if leader is not None and rng.random() < 0.7 else rng.choice(list(self.nodes.values()))
            if node.up:
                node.paused_until = self.now + rng.randint(3, 25)
                self.trace(f"PAUSE {node.id} until tick {node.paused_until}")
        if self.p_partition and rng.random() < self.p_partition:
            self.partition()
        if self.net.blocked and rng.random() < self.p_heal:
            self.trace("HEAL network")
            self.net.heal()
        if self.p_transfer and rng.random() < self.p_transfer:
            leader = self.leader()
            if leader is not None:
                target = rng.choice([i for i in self.ids if i != leader.id])
                self.trace(f"TRANSFER {leader.id} -> {target}")
                leader.raft.transfer_leadership(target)  # type: ignore[union-attr]
                leader.driver.kick()  # type: ignore[union-attr]

    def restart(self, node: SimNode) -> None:
        lost = node.lost_unsynced
        self.start(node, self.rng.getrandbits(32))
        hs = node.live.hard_state
        self.trace(f"RESTART {node.id}{' (lost its unsynced write)' if lost else ''}: term={hs.term} "
                   f"vote={hs.vote} commit={hs.commit} last={node.live.last_index()}")

    def partition(self) -> None:
        rng = self.rng
        kind = rng.randrange(3)
        if kind == 0:
            shuffled = list(self.ids)
            rng.shuffle(shuffled)
            cut = rng.randint(1, len(shuffled) - 1)
            groups = [sorted(shuffled[:cut]), sorted(shuffled[cut:])]
            self.trace(f"PARTITION {groups}")
            self.net.partition(groups)
        elif kind == 1:
            leader = self.leader()
            victim = leader.id if leader is not None and rng.random() < 0.5 else rng.choice(self.ids)
            self.trace(f"ISOLATE {victim}")
            self.net.partition([[victim], [i for i in self.ids if i != victim]])
        else:
            pairs = []
            for _ in range(rng.randint(1, len(self.ids))):
                a, b = rng.sample(self.ids, 2)
                pairs.append((a, b))
            self.trace(f"BLOCK one-way {pairs}")
            self.net.block(pairs)

    def propose(self) -> int | None:
        """A client sends to a random live node and follows one NotLeader redirect."""
        rng = self.rng
        up = [n for n in self.nodes.values() if n.up and n.paused_until <= self.now]
        if not up:
            return None
        node = rng.choice(up)
        self.proposals += 1
        data = f"{self.seed}:{self.proposals}".encode()
        for _ in range(2):
            try:
                index = self.submit(node, data)[0]
            except ProposalDropped as exc:
                target = self.nodes.get(exc.leader_id or "")
                if target is None or not target.up or target is node or target.paused_until > self.now:
                    return None
                node = target
                continue
            if self.verbose:
                self.trace(f"PROPOSE {data!r} at {node.id} -> index {index} term {node.raft.term}")  # type: ignore[union-attr]
            return index
        return None

    def submit(self, node: SimNode, data: bytes) -> tuple[int, bytes]:
        """Propose through the node's driver: (index, entry bytes); its answer is checked against the cluster."""
        holder: list[tuple[int, bytes]] = []
        checker = self.checker

        def answer(pos: int, ok: bool) -> None:
            if ok:
                checker.acknowledged(node.id, *holder[0])

        index, entry = node.propose(data, answer)
        holder.append((index, entry))
        return index, entry

    def leader(self) -> SimNode | None:
        best = None
        for node in self.nodes.values():
            if node.up and node.paused_until <= self.now and node.raft.role is Role.LEADER and (  # type: ignore[union-attr]
                    best is None or node.raft.term > best.raft.term):  # type: ignore[union-attr]
                best = node
        return best

    # ------------------------------------------------------------------ heal and liveness
    def heal(self) -> None:
        self.trace("HEAL all: network healed, faults off, every node restarted")
        self.net.heal()
        self.net.quiet()
        self.p_tick_skip = 0.0
        self.p_moment = 0.0
        self.p_pause = 0.0
        self.p_window = 0.0
        for node in self.nodes.values():
            node.paused_until = 0
        for node in self.nodes.values():
            if not node.up:
                self.restart(node)

    def check_liveness(self) -> None:
        """After the heal a leader must appear and a new proposal commit on every node."""
        start = self.now
        # Bounded, but a follower far behind under a tiny batch/window config needs time to catch up.
        backlog = max(n.live.last_index() for n in self.nodes.values()) - min(
            n.live.last_index() for n in self.nodes.values())
        budget = LIVENESS_TICKS + 2 * backlog
        target: tuple[int, bytes] | None = None
        attempt_at = -1
        attempts = 0
        while self.now - start < budget:
            self.tick(faults=False)
            leader = self.leader()
            if target is not None:
                index, data = target
                if self.checker.committed.get(index, (0, b""))[1] == data:
                    if all(n.applied >= index for n in self.nodes.values()):
                        self.liveness_ticks = self.now - start
                        self.trace(f"LIVE: {data!r} committed at {index} and applied everywhere "
                                   f"{self.liveness_ticks} ticks after the heal")
                        for node in self.nodes.values():
                            self.checker.check_complete(node, f"final state of {node.id}", upto=index)
                            if hasattr(node, "check_queues"):  # the dledger family: its consume queue too
                                node.check_queues()
                        return
                    continue
                if self.now - attempt_at < 30:
                    continue
            if leader is not None:
                attempts += 1
                data = f"{self.seed}:final:{attempts}".encode()
                try:
                    target = self.submit(leader, data)
                except ProposalDropped:
                    continue
                index = target[0]
                attempt_at = self.now
                self.trace(f"PROPOSE final {data!r} at {leader.id} -> index {index}")
        state = "; ".join(repr(n.raft) for n in self.nodes.values())
        raise SimulationFailure(self.seed, f"liveness: no proposal committed on all nodes within {budget} "
                                f"ticks after the heal ({state})", replay_command(self.seed, self.bugs, self.profile))

    def trace(self, text: str) -> None:
        if self.verbose:
            self.out(f"[t={self.now:4d}] {text}")


def _fmt_event(ev: RaftEvent) -> str:
    fields = []
    for name in ("term", "index", "from_index", "to_index", "peer", "role", "leader", "pre_vote", "reason"):
        value = getattr(ev, name)
        if value not in (-1, "", None, False):
            fields.append(f"{name}={value}")
    return f"{ev.kind.value} " + " ".join(fields)


def _fmt_msg(m: Message) -> str:
    text = f"{m.type.name} term={m.term} index={m.index} log_term={m.log_term}"
    if m.entries:
        text += f" entries={m.entries[0].index}..{m.entries[-1].index}"
    if m.commit:
        text += f" commit={m.commit}"
    if m.reject:
        text += f" REJECT hint={m.reject_hint}"
    if m.force:
        text += " force"
    return text


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), verbose: int = 0,
             out: Callable[[str], None] = print, profile: str = "mixed") -> SimStats:
    """Run one seed; raises SimulationFailure (with the replay command) on any violation."""
    return Simulation(seed, bugs, verbose, out, profile).run()


def try_seed(args: tuple[int, frozenset[str], str]) -> tuple[int, str | None, SimStats | None]:
    """For process pools: (seed, failure text or None, stats)."""
    seed, bugs, profile = args
    try:
        return seed, None, run_seed(seed, bugs, profile=profile)
    except SimulationFailure as exc:
        return seed, str(exc), None


class _Observer:
    """The checker's hooks in a node's driver: storage as it was before each write, then the Ready."""

    __slots__ = ("node", "sim")

    def __init__(self, sim: Simulation, node: SimNode) -> None:
        self.sim = sim
        self.node = node

    def before_write(self, rd: Ready) -> None:
        self.sim.checker.before_write(self.node, rd)

    def written(self, rd: Ready) -> None:
        self.sim.observe_write(self.node, rd)


__all__ = ["SimStats", "Simulation", "SimulationFailure", "run_seed", "try_seed"]
