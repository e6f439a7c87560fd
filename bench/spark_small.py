"""One `analyze all` run in a fresh JVM, in CPU seconds: for small inputs such as the demo's Spark step.

    .venv/bin/python bench/spark_small.py DATA [KEY=VALUE ...] [--no-quick]     # DATA holds trace/ and ha/
    .venv/bin/python bench/spark_small.py ns:HOST:PORT [KEY=VALUE ...]          # a live cluster (the demo's)

``--quick-start`` is on unless ``--no-quick``; KEY=VALUE are further Spark settings.  Prints one JSON
line: seconds to start the session and to run the jobs, the driver JVM's CPU seconds, its threads'
CPU by name (``Thread-N`` is the py4j driver thread: planning and Janino; ``Executor task`` the tasks;
``CN CompilerThre`` HotSpot's JIT), the Python workers' CPU (the data source reads through them) and
the load average.  Session 15 measured the demo's step with it (docs/ANALYTICS.md, "Results").
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _times(stat: str, children: bool = False) -> float:
    fields = stat.rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15 if children else 13]) / TICK


def main() -> None:
    started = time.monotonic()
    from rocketscope.spark.run import read_rows, run_jobs
    from rocketscope.spark.session import get_session

    src, *rest = sys.argv[1:]
    conf = dict(a.split("=", 1) for a in rest if "=" in a)
    spark = get_session("local[2]", quick_start="--no-quick" not in rest, conf=conf)
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    ready = time.monotonic()
    if src.startswith("ns:"):
        from rocketscope.names import HA_EVENTS_TOPIC, TRACE_TOPIC
        from rocketscope.spark.datasource import as_rows, read_topics

        rows = as_rows(read_topics(spark, src[3:], [TRACE_TOPIC, HA_EVENTS_TOPIC]))
    else:
        rows = read_rows(spark, [f"{src}/trace", f"{src}/ha"])
    out = tempfile.mkdtemp(prefix="rs-small-")
    timings = run_jobs(spark, rows, out, ["all"], progress=False)
    done = time.monotonic()
    jvm_cpu = _times(Path(f"/proc/{pid}/stat").read_text())
    threads: dict[str, float] = collections.defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        threads[re.sub(r"[0-9]+", "N", stat[stat.index("(") + 1:stat.rindex(")")])] += _times(stat)
    workers = 0.0  # the pyspark daemon, children of the JVM, with the workers it has reaped
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text() if proc.name.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            workers += _times(stat, children=True)
    spark.stop()
    print(json.dumps({
        "source": src, "conf": conf, "start_s": round(ready - started, 1), "jobs_s": round(done - ready, 1),
        "jobs": timings, "jvm_cpu_s": round(jvm_cpu, 1), "py_workers_cpu_s": round(workers, 1),
        "threads": {k: round(v, 1) for k, v in sorted(threads.items(), key=lambda kv: -kv[1])[:8]},
        "load": os.getloadavg(), "out": out,
    }))


if __name__ == "__main__":
    main()
