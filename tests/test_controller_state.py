"""The controller state machine without I/O: ids, registration, elections, SyncStateSet, determinism."""

from __future__ import annotations

import json
import random

from rocketscope.broker.controller.epoch import EpochEntry, EpochFile, find_consistent_point
from rocketscope.broker.controller.state import (
    NO_MASTER,
    Code,
    ControllerState,
    LiveInfo,
    LiveTable,
    decode_event,
    elect_policy,
    encode_event,
)

NAME = "broker-a"


def commit(state: ControllerState, d) -> None:  # type: ignore[no-untyped-def]
    for e in d.events:
        assert state.apply(decode_event(encode_event(e)))


def live_of(**infos: tuple[int, int, int]):  # type: ignore[no-untyped-def]
    """b1=(epoch, max_offset, priority) ... → lookup by id."""
    table = {int(k[1:]): LiveInfo("c", NAME, int(k[1:]), epoch=v[0], max_offset=v[1], priority=v[2])
             for k, v in infos.items()}
    return table.get


def setup_set(n: int = 3) -> ControllerState:
    s = ControllerState()
    for i in range(1, n + 1):
        assert s.next_broker_id(NAME) == i
        d = s.decide_apply_broker_id("c", NAME, i, f"addr{i};0")
        assert d.ok
        commit(s, d)
        d = s.decide_register(NAME, i, f"a{i}", f"h{i}", f"g{i}")
        assert d.ok
        commit(s, d)
    return s


def test_broker_ids_are_issued_from_one_and_guarded_by_check_code() -> None:
    s = ControllerState()
    assert s.decide_apply_broker_id("c", NAME, 2, "x").code == Code.CONTROLLER_BROKER_ID_INVALID
    commit(s, s.decide_apply_broker_id("c", NAME, 1, "x"))
    assert s.next_broker_id(NAME) == 2
    assert s.decide_apply_broker_id("c", NAME, 1, "x").ok  # same broker again: accepted, nothing to replicate
    assert s.decide_apply_broker_id("c", NAME, 1, "y").code == Code.CONTROLLER_BROKER_ID_INVALID
    assert s.decide_register(NAME, 7, "a", "h", "g").code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_first_election_goes_to_the_first_broker_that_asks() -> None:
    s = setup_set()
    d = s.decide_elect(NAME, 2, False, live_of(b1=(0, 0, 9), b2=(0, 0, 9)), unclean=False)
    assert d.ok and d.broker_id == 2
    commit(s, d)
    bs = s.sets[NAME]
    assert (bs.master_id, bs.master_epoch, bs.sync_state_set) == (2, 1, (2,))
    assert s.decide_elect(NAME, 1, False, live_of(b1=(1, 0, 9), b2=(1, 0, 9)), False).code == \
        Code.CONTROLLER_MASTER_STILL_EXIST


def elected(s: ControllerState, master: int, members: tuple[int, ...]) -> None:
    commit(s, s.decide_elect(NAME, master, False, live_of(**{f"b{master}": (0, 0, 0)}), False))
    alive = set(members)
    d = s.decide_alter_sync_state_set(NAME, master, s.sets[NAME].master_epoch, members,
                                      s.sets[NAME].sync_state_set_epoch, lambda b: b in alive)
    assert d.ok, d.remark
    commit(s, d)


def test_election_ranks_epoch_then_offset_then_priority() -> None:
    s = setup_set()
    elected(s, 1, (1, 2, 3))
    # master 1 dead; 2 has the higher epoch even with a smaller offset
    d = s.decide_elect(NAME, NO_MASTER, False, live_of(b2=(5, 100, 9), b3=(4, 900, 0)), False)
    assert d.broker_id == 2
    # same epoch: larger offset wins
    assert s.decide_elect(NAME, NO_MASTER, False, live_of(b2=(5, 100, 0), b3=(5, 900, 9)), False).broker_id == 3
    # same epoch and offset: lower priority value wins, then the lower id
    assert s.decide_elect(NAME, NO_MASTER, False, live_of(b2=(5, 9, 7), b3=(5, 9, 3)), False).broker_id == 3
    assert s.decide_elect(NAME, NO_MASTER, False, live_of(b2=(5, 9, 3), b3=(5, 9, 3)), False).broker_id == 2
    commit(s, d)
    bs = s.sets[NAME]
    assert (bs.master_id, bs.master_epoch, bs.sync_state_set) == (2, 2, (2,))


def test_election_only_from_the_sync_state_set_unless_unclean() -> None:
    s = setup_set()
    elected(s, 1, (1, 2))  # 3 is behind: not in the set
    only_3 = live_of(b3=(1, 500, 0))
    d = s.decide_elect(NAME, 3, False, only_3, unclean=False)
    assert d.code == Code.CONTROLLER_ELECT_MASTER_FAILED and not d.events
    d = s.decide_elect(NAME, NO_MASTER, False, only_3, unclean=False)
    assert d.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    commit(s, d)  # the controller clears the dead master; the epoch stays
    assert s.sets[NAME].master_id == NO_MASTER and s.sets[NAME].master_epoch == 1
    d = s.decide_elect(NAME, NO_MASTER, False, only_3, unclean=True)
    assert d.ok and d.broker_id == 3 and d.events[0]["unclean"]
    commit(s, d)
    assert s.sets[NAME].master_epoch == 2 and s.sets[NAME].sync_state_set == (3,)


def test_designated_election_and_alive_old_master() -> None:
    s = setup_set()
    elected(s, 1, (1, 2, 3))
    everyone = live_of(b1=(1, 10, 0), b2=(1, 10, 0), b3=(1, 10, 0))
    assert s.decide_elect(NAME, NO_MASTER, False, everyone, False).code == Code.CONTROLLER_MASTER_STILL_EXIST
    d = s.decide_elect(NAME, 3, True, everyone, False)
    assert d.ok and d.broker_id == 3
    assert s.decide_elect(NAME, 3, True, live_of(b1=(1, 10, 0)), False).code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert s.decide_elect(NAME, 9, True, everyone, False).code == Code.CONTROLLER_INVALID_REQUEST


def test_alter_sync_state_set_is_fenced() -> None:
    s = setup_set()
    elected(s, 1, (1, 2, 3))
    bs = s.sets[NAME]
    alive = lambda b: True  # noqa: E731
    assert s.decide_alter_sync_state_set(NAME, 1, 1, (1, 2, 3), bs.sync_state_set_epoch, alive).code == \
        Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert s.decide_alter_sync_state_set(NAME, 2, 1, (1, 2), bs.sync_state_set_epoch, alive).code == \
        Code.CONTROLLER_INVALID_MASTER
    assert s.decide_alter_sync_state_set(NAME, 1, 0, (1, 2), bs.sync_state_set_epoch, alive).code == \
        Code.CONTROLLER_FENCED_MASTER_EPOCH
    assert s.decide_alter_sync_state_set(NAME, 1, 1, (1, 2), bs.sync_state_set_epoch - 1, alive).code == \
        Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert s.decide_alter_sync_state_set(NAME, 1, 1, (1, 2, 8), bs.sync_state_set_epoch, alive).code == \
        Code.CONTROLLER_INVALID_REPLICAS
    assert s.decide_alter_sync_state_set(NAME, 1, 1, (1, 2), bs.sync_state_set_epoch, lambda b: b != 2).code == \
        Code.CONTROLLER_BROKER_NOT_ALIVE
    assert s.decide_alter_sync_state_set(NAME, 1, 1, (2, 3), bs.sync_state_set_epoch, alive).code == \
        Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    d = s.decide_alter_sync_state_set(NAME, 1, 1, (1, 2), bs.sync_state_set_epoch, alive)
    stale = s.decide_alter_sync_state_set(NAME, 1, 1, (1,), bs.sync_state_set_epoch, alive)
    commit(s, d)
    assert not s.apply(stale.events[0]), "an event decided on a stale set epoch must be ignored"
    assert bs.sync_state_set == (1, 2)


def test_stale_election_event_is_ignored_everywhere() -> None:
    s = setup_set()
    elected(s, 1, (1, 2, 3))
    a = s.decide_elect(NAME, NO_MASTER, False, live_of(b2=(1, 5, 0)), False)
    b = s.decide_elect(NAME, NO_MASTER, False, live_of(b3=(1, 5, 0)), False)
    assert s.apply(a.events[0]) and not s.apply(b.events[0])
    assert s.sets[NAME].master_id == 2 and s.sets[NAME].master_epoch == 2


def test_replicas_applying_the_same_log_agree() -> None:
    rng = random.Random(7)
    leader = setup_set()
    log: list[bytes] = []
    for i in range(1, 4):
        log.append(encode_event({"type": "apply_broker_id", "cluster": "c", "name": NAME, "broker_id": i,
                                 "check_code": f"addr{i};0"}))
    for _ in range(200):
        bs = leader.sets[NAME]
        alive = {b for b in (1, 2, 3) if rng.random() < 0.7}
        lookup = live_of(**{f"b{b}": (rng.randint(0, 3), rng.randint(0, 99), 0) for b in alive})
        if rng.random() < 0.5:
            d = leader.decide_elect(NAME, NO_MASTER, False, lookup, unclean=rng.random() < 0.2)
        else:
            members = tuple(b for b in (1, 2, 3) if rng.random() < 0.6)
            d = leader.decide_alter_sync_state_set(NAME, bs.master_id, bs.master_epoch, members,
                                                   bs.sync_state_set_epoch, alive.__contains__)
        for e in d.events:
            leader.apply(e)
            log.append(encode_event(e))
    replicas = [ControllerState() for _ in range(2)]
    for r in replicas:
        for data in log[:3]:
            r.apply(decode_event(data))
        for i in range(1, 4):
            commit(r, r.decide_register(NAME, i, f"a{i}", f"h{i}", f"g{i}"))
        for data in log[3:]:
            r.apply(decode_event(data))
    assert json.dumps(replicas[0].snapshot()) == json.dumps(replicas[1].snapshot())
    assert replicas[0].sets[NAME].master_epoch == leader.sets[NAME].master_epoch


def test_live_table_expires_by_the_brokers_own_timeout() -> None:
    t = LiveTable()
    t.heartbeat(LiveInfo("c", NAME, 1, last_ms=1000, timeout_ms=500))
    t.heartbeat(LiveInfo("c", NAME, 2, last_ms=1000, timeout_ms=5000))
    assert t.alive(NAME, 1, 1500) and not t.alive(NAME, 1, 1501)
    assert [i.broker_id for i in t.expire(2000)] == [1]
    assert t.active(2000) == 1


def test_masters_to_reelect() -> None:
    s = setup_set()
    elected(s, 1, (1, 2))
    assert s.masters_to_reelect(lambda n, b: True) == []
    assert s.masters_to_reelect(lambda n, b: b != 1) == [NAME]
    assert s.masters_to_reelect(lambda n, b: False) == []  # nobody alive: nothing to elect


def test_elect_policy_without_candidates() -> None:
    assert elect_policy((), (), NO_MASTER, None, lambda b: None) is None


def test_epoch_file_and_consistent_point(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    assert f.append(1, 0) and f.append(2, 100) and not f.append(2, 150) and not f.append(3, 50)
    assert EpochFile(tmp_path / "epochFileCheckpoint").entries == [EpochEntry(1, 0), EpochEntry(2, 100)]
    (tmp_path / "epochFileCheckpoint").write_text("garbage")  # torn: the .bak copy is used
    assert EpochFile(tmp_path / "epochFileCheckpoint").entries == [EpochEntry(1, 0), EpochEntry(2, 100)]
    # old master wrote epoch 2 up to 180; the new master (epoch 3 from 150) had epoch 2 only up to 150
    old = [EpochEntry(1, 0), EpochEntry(2, 100)]
    new = [EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 150)]
    assert find_consistent_point(old, 180, new, 400) == 150
    assert find_consistent_point(old, 120, new, 400) == 120  # behind: nothing to cut
    assert find_consistent_point([EpochEntry(5, 0)], 10, new, 400) is None
