"""The harness's observers: the clients' access point read from /proc, and the fault timeline."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from chaos.sockets import connections_to
from chaos.timeline import show


def test_connections_to_counts_the_established_connections_this_process_opened() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_server(("127.0.0.1", 0)) as idle:
        port, idle_port = server.getsockname()[1], idle.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        accepted = [server.accept()[0] for _ in clients]
        try:
            counts = connections_to({port, idle_port})
            # the accepted ends are ours too, but their remote port is the clients' ephemeral one
            assert counts[port] == 3 and counts[idle_port] == 0
        finally:
            for s in clients + accepted:
                s.close()
        assert connections_to({port})[port] == 0


def test_timeline_places_server_log_lines_inside_the_longest_gap(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    wall0 = 1_790_000_000.0  # the history's t = 0 on the wall clock
    sends = [1.0, 1.1, 1.2, 2.9, 3.0]  # the longest gap is 1.2 -> 2.9
    events = [{"f": "clock", "type": "info", "proc": "runner", "t": 0.0, "wall": wall0},
              {"f": "nemesis", "type": "invoke", "proc": "nemesis", "t": 1.15, "n": 0, "node": 0},
              *({"f": "send", "type": "ok", "proc": "p-normal", "t": t, "key": f"n-{i}"} for i, t in enumerate(sends))]
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    fault = {"n": 0, "fault": {"kind": "pause", "target": "writer"}, "node": 0, "writer_before": 0,
             "access_point": 0, "load": 0.5, "start": 1.15, "healed": 2.5, "settled": 2.8, "end": 3.5}
    (tmp_path / "verdict.json").write_text(json.dumps({"faults": [fault]}))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall0 + 2))  # t = 2.0 s, inside the gap
    (tmp_path / "d1.log").write_text(f"{stamp},000 INFO broker x: ha event leader_elected: {{'leader': 'n1'}}\n"
                                     f"{stamp},000 INFO broker x: an uninteresting line\n")
    show(tmp_path, None)
    out = capsys.readouterr().out
    assert "longest gap 1.700 s from 1.200 to 2.900" in out
    assert "(the clients' access point)" in out
    line = next(ln for ln in out.splitlines() if "leader_elected" in ln)
    assert line.split()[0] == "2.000" and line.endswith("<gap>")
    assert "uninteresting" not in out
