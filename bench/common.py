"""Shared pieces of the benchmarks: servers on loopback, percentiles, CPU accounting, JSON, tables, profiles.

Every benchmark module imports this so that they all start RocketScope and NATS the same
way (the same harness as the end-to-end tests, tests/cluster.py), report percentiles the
same way and write results in one shape: ``bench/results/<name>.json`` holding the
figures plus ``machine`` (cores, load average at start) and ``command``, because a figure
without the machine and the command that produced it cannot be compared with anything.

Processes started here are tracked and killed on exit, on SIGTERM/SIGINT and on errors:
a benchmark must never leave a broker or a nats-server behind on a shared machine.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VENV_BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests"))  # the end-to-end harness (cluster.py, rmq.py) is shared with the tests

BODY_1K = b"x" * 1024
_LOAD_AT_START = os.getloadavg()  # the machine is shared: how busy it was is part of every result

# ------------------------------------------------------------------ process hygiene
_CHILDREN: list[subprocess.Popen[bytes]] = []
_CLUSTERS: list[Any] = []


def _kill_all() -> None:
    """Kill what is still running; idempotent (atexit, signal handler and context managers may all call it)."""
    for c in list(_CLUSTERS):
        with contextlib.suppress(Exception):
            c.stop()
        _CLUSTERS.remove(c)
    for p in list(_CHILDREN):
        if p.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.wait(10)
        _CHILDREN.remove(p)


def _on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally/with, then atexit kills the rest


atexit.register(_kill_all)
signal.signal(signal.SIGTERM, _on_signal)


def spawn(args: Sequence[str], log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a tracked child in its own process group (killed with the group on exit)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _CHILDREN.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL of the group after ``timeout``."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if proc in _CHILDREN:
        _CHILDREN.remove(proc)


from rocketscope.ports import free_port, port_open  # noqa: E402 - shared with the tests and the demo


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if cond():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def scratch_dir(prefix: str, base: Path | None = None) -> Path:
    """A fresh directory on a real disk (never tmpfs: fsync there is free and the figures would lie)."""
    base = base or Path(os.environ.get("ROCKETSCOPE_BENCH_DIR", tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def filesystem_of(path: Path) -> str:
    """``device fstype`` of the mount holding ``path`` (from /proc/mounts)."""
    best, found = "", "unknown"
    real = str(Path(path).resolve())
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, found = mnt, f"{dev} {fstype}"
    return found


# ------------------------------------------------------------------ reporting
class Progress:
    """Progress lines ``[name +12.3s] text``: a long benchmark must show it is alive and where it is."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.t0 = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{self.name} +{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)


def percentiles(samples_s: Sequence[float], qs: Sequence[float] = (0.5, 0.99)) -> dict[str, float]:
    """Nearest-rank percentiles in milliseconds (``p50_ms``, ``p99_ms``); zeros when empty."""
    if not samples_s:
        return {f"p{round(q * 100):d}_ms": 0.0 for q in qs}
    ordered = sorted(samples_s)
    out = {}
    for q in qs:
        rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
        out[f"p{round(q * 100):d}_ms"] = ordered[rank] * 1000.0
    return out


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                            "kernel": platform.release(), "loadavg_at_start": _LOAD_AT_START,
                            "loadavg_at_end": os.getloadavg()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        info["mem_gib"] = round(int(mem[1]) / 1024 / 1024, 1)
    return info


def write_json(data: dict[str, Any], out: Path) -> Path:
    """Write ``data`` with the machine and the command line that produced it."""
    doc = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "machine": machine_info(), **data}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table (numbers right-aligned), printed at the end of each benchmark."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.0f}"
        return str(v)

    cells = [[fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


# ------------------------------------------------------------------ CPU accounting
def proc_cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process and all its threads so far (/proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """CPU seconds of this (client) process, every thread: the client's own cost is part of the picture."""
    return time.process_time()


# ------------------------------------------------------------------ RocketScope
@contextlib.contextmanager
def rocketscope_broker(prefix: str = "rs-bench-", **conf: Any) -> Iterator[Any]:
    """A name server and one standalone broker (tests/cluster.py), stopped and removed on exit.

    Yields the ``BrokerNode``; ``node.proc.popen.pid`` is the broker process (for CPU and profiles).
    """
    from cluster import LocalCluster

    root = scratch_dir(prefix)
    c = LocalCluster(root)
    _CLUSTERS.append(c)
    try:
        c.start_namesrv()
        yield c, c.start_broker("bench", **conf)
    except BaseException:
        sys.stderr.write(c.logs()[-4000:] + "\n")
        raise
    finally:
        c.stop()
        if c in _CLUSTERS:
            _CLUSTERS.remove(c)
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ NATS JetStream
@dataclass
class NatsCluster:
    """nats-server processes (one, or a 3-node JetStream cluster with routes), all on loopback."""

    root: Path
    client_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


@contextlib.contextmanager
def nats_jetstream(nodes: int = 1, extra_conf: str = "") -> Iterator[NatsCluster]:
    """``nodes`` nats-server processes with JetStream file storage in a scratch dir (Debian package ``nats-server``).

    nats-server 2.9 has no ``sync_interval`` setting: its file store writes into the page
    cache and fsyncs in the background, which is what the benchmarks state as its policy.
    """
    exe = shutil.which("nats-server")
    if exe is None:
        raise RuntimeError("nats-server is missing: apt-get install -y --no-install-recommends nats-server")
    root = scratch_dir("nats-bench-")
    ns = NatsCluster(root)
    try:
        client_ports = [free_port() for _ in range(nodes)]
        route_ports = [free_port() for _ in range(nodes)]
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in route_ports)
        for i in range(nodes):
            store = root / f"n{i}"
            conf = [f"server_name: n{i}", f"listen: 127.0.0.1:{client_ports[i]}",
                    f'jetstream {{ store_dir: "{store}" }}']
            if nodes > 1:
                conf.append(f"cluster {{ name: bench, listen: 127.0.0.1:{route_ports[i]}, routes: [{routes}] }}")
            conf.append(extra_conf)
            path = root / f"n{i}.conf"
            path.write_text("\n".join(conf) + "\n")
            ns.procs.append(spawn([exe, "-c", str(path)], root / f"n{i}.log"))
            ns.client_ports.append(client_ports[i])
        for port, proc in zip(ns.client_ports, ns.procs, strict=True):
            wait_for(lambda port=port, proc=proc: proc.poll() is None and port_open(port), 20, f"nats-server :{port}")
        yield ns
    finally:
        for p in ns.procs:
            stop(p)
        shutil.rmtree(root, ignore_errors=True)


async def jetstream_ready(nc: Any, timeout: float = 30.0) -> Any:
    """The JetStream context once the meta leader answers (a cluster elects one a few seconds after start)."""
    import asyncio

    js = nc.jetstream(timeout=10)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await js.account_info()
            return js
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------ profiles
def py_spy() -> str | None:
    """py-spy in the venv or on PATH (``pip install py-spy`` into the venv; never a project dependency)."""
    cand = VENV_BIN / "py-spy"
    return str(cand) if cand.exists() else shutil.which("py-spy")


def start_profile(pid: int, seconds: float, out: Path, rate: int = 100,
                  native: bool = False) -> subprocess.Popen[bytes] | None:
    """Sample ``pid`` with py-spy for ``seconds`` into collapsed stacks at ``out`` (None when py-spy is missing).

    ``native`` adds C/Cython frames: grpc's asyncio server is Cython, and without them its
    cost shows up only as the Python frame that called into it (``Handle._run``, ``Thread.run``).
    """
    exe = py_spy()
    if exe is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return spawn([exe, "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", str(rate), "-f", "raw",
                  "--function", *(["--native"] if native else ["--nonblocking"]), "-o", str(out)],
                 out.with_suffix(".log"))


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py)`` -> ``file.py:func`` with the path made short and repo-relative."""
    frame = frame.strip()
    if frame.endswith(")") and " (" in frame:
        func, path = frame[:-1].rsplit(" (", 1)
        path = path.split(":")[0]
        for marker in ("/site-packages/", str(ROOT) + "/", "/lib/python3"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        return f"{path}:{func}"
    return frame


_WAIT_MARKERS = ("epoll_wait", "pthread_cond_wait", "pthread_cond_timedwait", "futex", "sem_wait", "sem_timedwait",
                 "PyThread_acquire_lock", "take_gil", "drop_gil", "_queue_SimpleQueue_get")
# What the send path is made of, for the breakdown: name -> frame-name prefix (inclusive share of CPU samples)
SEND_PATH_PARTS = {
    "handler SendMessage (ours, all of it)": "broker/grpc_service.py:MessagingService.SendMessage",
    "  store put (append, dispatch, flush wait)": "broker/store/message_store.py:MessageStore.put",
    "  client registry + metadata (_client)": "broker/grpc_service.py:MessagingService._client",
    "  metadata_value (every call)": "broker/grpc_service.py:metadata_value",
    "  validation (check_message)": "broker/validation.py:check_message",
    "  conversion (to_stored)": "broker/convert.py:to_stored",
    "background: checkpoint (queues+index fsync)": "broker/store/message_store.py:MessageStore._save_checkpoint",
    "fdatasync calls (commit log; queues in the checkpoint)": "broker/store/segments.py:SegmentedLog.sync",
}


def summarise_profile(raw: Path, top: int = 15, drop_idle: bool = False) -> dict[str, Any]:
    """Self and inclusive shares of the hottest functions from py-spy's collapsed stacks.

    Self time says where the CPU is burnt; inclusive time of our own functions (broker/,
    rocketscope/) says which of our code paths are worth optimising first.  ``drop_idle``
    is for ``--native`` profiles, where py-spy cannot tell idle threads apart: samples
    whose innermost frames are waits (epoll, condition variables, the GIL) are dropped.
    """
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    part_c: Counter[str] = Counter()
    total = idle = 0
    if not raw.exists():
        return {"samples": 0, "note": f"no profile written ({raw.with_suffix('.log')})"}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if drop_idle and any(m in f for f in frames[-4:] for m in _WAIT_MARKERS):
            idle += n
            continue
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        total += n
        if frames:
            self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
        for name, prefix in SEND_PATH_PARTS.items():
            if any(f.startswith(prefix) for f in frames):
                part_c[name] += n
        if any(f.startswith(("broker/", "telemetry/", "trace/")) for f in frames):
            part_c["ours"] += n
    ours = {f: c for f, c in incl.items() if f.startswith(("broker/", "rocketscope/", "telemetry/", "trace/"))}

    def share(c: int) -> float:
        return round(100.0 * c / total, 1) if total else 0.0

    parts = {name: share(part_c[name]) for name in SEND_PATH_PARTS}
    parts["outside our code (grpc aio, asyncio, sockets)"] = round(100.0 - share(part_c["ours"]), 1)
    out: dict[str, Any] = {"samples": total, "send_path_breakdown_pct": parts,
                           "top_self_pct": [[f, share(c)] for f, c in self_c.most_common(top)],
                           "top_own_inclusive_pct": [[f, share(c)]
                                                     for f, c in sorted(ours.items(), key=lambda kv: -kv[1])[:top]]}
    if drop_idle:
        out["idle_samples_dropped"] = idle
    return out


def print_profile(summary: dict[str, Any], title: str) -> None:
    print(f"\n{title}: {summary.get('samples', 0)} samples")
    for name, pct in summary.get("send_path_breakdown_pct", {}).items():
        print(f"  {'breakdown':<20}{pct:6.1f}%  {name}")
    for key, label in (("top_self_pct", "self"), ("top_own_inclusive_pct", "inclusive, our code")):
        for f, pct in summary.get(key, [])[:10]:
            print(f"  {label:<20}{pct:6.1f}%  {f}")
