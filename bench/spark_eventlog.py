"""Where a Spark run's time goes, stage by stage, from Spark's event log (no UI needed).

``bench/spark_profile.py`` gives CPU per step and per JVM thread; this reads the event log
of the same run (``--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=DIR``) and
sums, per Spark job (one ``count`` or one table write): its stages and tasks, the tasks'
executor run and CPU time, deserialisation, GC, shuffle bytes, input bytes, and the
time the job spent outside its tasks (planning, Janino, scheduling): wall minus the busiest
core's share of task time.  That split is what says whether a step's cost is the data
(task time grows with rows) or the fixed cost of a run (stages, planning, compilation).

    .venv/bin/python bench/spark_eventlog.py /tmp/ev/eventlog_v2_local-*/events_1_local-*.zstd [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any


def read_log(path: Path) -> str:
    """The log's text: Spark 4 compresses event logs with zstd by default (``events_1_<app>.zstd``)."""
    if path.suffix == ".zstd":
        return subprocess.run(["zstd", "-dc", str(path)], check=True, capture_output=True, text=True).stdout
    return path.read_text()


def summarize(path: Path, cores: int = 2) -> list[dict[str, Any]]:
    """One entry per Spark job of the log, in order, with its stages' and tasks' totals."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    stage_info: dict[int, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    operators: dict[int, str] = {}
    for line in read_log(path).splitlines():
        ev = json.loads(line)
        kind = ev.get("Event")
        if kind == "SparkListenerJobStart":
            desc = (ev.get("Properties") or {}).get("spark.job.description") or ""
            call = (ev.get("Properties") or {}).get("callSite.short") or ""
            jobs[ev["Job ID"]] = {"job": ev["Job ID"], "start": ev["Submission Time"], "what": desc or call,
                                  "stages": [s["Stage ID"] for s in ev["Stage Infos"]]}
            for s in ev["Stage Infos"]:
                stage_job[s["Stage ID"]] = ev["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs[ev["Job ID"]]["end"] = ev["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = ev["Stage Info"]
            st = stage_info[info["Stage ID"]]
            st["ran"] = 1
            st["tasks"] = info["Number of Tasks"]
            operators[info["Stage ID"]] = stage_operators(info)
        elif kind == "SparkListenerTaskEnd":
            st = stage_info[ev["Stage ID"]]
            m = ev.get("Task Metrics") or {}
            st["run_ms"] += m.get("Executor Run Time", 0)
            st["cpu_ms"] += m.get("Executor CPU Time", 0) / 1e6
            st["deser_ms"] += m.get("Executor Deserialize Time", 0)
            st["gc_ms"] += m.get("JVM GC Time", 0)
            sw = m.get("Shuffle Write Metrics") or {}
            sr = m.get("Shuffle Read Metrics") or {}
            st["shuffle_write_mb"] += sw.get("Shuffle Bytes Written", 0) / 1e6
            st["shuffle_read_mb"] += (sr.get("Remote Bytes Read", 0) + sr.get("Local Bytes Read", 0)) / 1e6
            st["input_mb"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0) / 1e6
            st["output_mb"] += (m.get("Output Metrics") or {}).get("Bytes Written", 0) / 1e6
            st["spill_mb"] += m.get("Disk Bytes Spilled", 0) / 1e6
    out = []
    for job in sorted(jobs.values(), key=lambda j: j["job"]):
        ran = [stage_info[s] for s in job["stages"] if stage_info[s].get("ran")]
        total = {k: round(sum(s.get(k, 0.0) for s in ran), 1) for k in
                 ("run_ms", "cpu_ms", "deser_ms", "gc_ms", "shuffle_write_mb", "shuffle_read_mb", "input_mb",
                  "output_mb", "spill_mb")}
        wall = job.get("end", job["start"]) - job["start"]
        per_stage = [{"stage": s, "cpu_ms": round(stage_info[s]["cpu_ms"]), "tasks": int(stage_info[s]["tasks"]),
                      "shuffle_write_mb": round(stage_info[s]["shuffle_write_mb"], 1),
                      "operators": operators.get(s, "")} for s in job["stages"] if stage_info[s].get("ran")]
        out.append({"job": job["job"], "what": job["what"][:60], "stages_ran": len(ran), "per_stage": per_stage,
                    "stages_skipped": len(job["stages"]) - len(ran),
                    "tasks": int(sum(s.get("tasks", 0) for s in ran)), "wall_ms": wall,
                    "outside_tasks_ms": round(max(0.0, wall - total["run_ms"] / cores)), **total})
    return out


def stage_operators(info: dict[str, Any]) -> str:
    """The operators a stage ran, from its RDDs' scopes (``Exchange``, ``SortAggregate``, ``InMemoryTableScan``...),
    in the order Spark lists them, without the ``WholeStageCodegen (n)`` wrappers."""
    names: list[str] = []
    for rdd in info.get("RDD Info", []):
        try:
            name = str(json.loads(rdd.get("Scope") or "{}").get("name") or "")
        except ValueError:
            continue
        if name and not name.startswith("WholeStageCodegen") and name not in names:
            names.append(name)
    return ", ".join(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--stages", action="store_true",
                        help="also one line per stage that ran: its tasks' CPU and the operators in it")
    args = parser.parse_args()
    rows = summarize(args.log, args.cores)
    cols = ["job", "stages_ran", "stages_skipped", "tasks", "wall_ms", "run_ms", "cpu_ms", "outside_tasks_ms",
            "gc_ms", "shuffle_write_mb", "input_mb", "output_mb", "spill_mb", "what"]
    print("\t".join(cols))
    for r in rows:
        print("\t".join(str(r[c]) for c in cols))
        if args.stages:
            for st in sorted(r["per_stage"], key=lambda st: -st["cpu_ms"]):
                print(f"    stage {st['stage']}: cpu {st['cpu_ms']} ms, {st['tasks']} tasks, shuffle out "
                      f"{st['shuffle_write_mb']} MB: {st['operators'][:150]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
