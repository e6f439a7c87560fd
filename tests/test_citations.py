"""Comments and docs cite only files that are in the repository (issue 17 point 7).

A comment that points a reader at ``tests/test_spark_plans.py`` or ``broker/config.py`` after the file was
renamed or never written sends them looking for nothing; two such citations survived three sessions of
reading.  Every path-like reference to a file under one of the project's folders (with a file extension)
in source, docs, deploy files and the Makefile must name an existing file.  Benchmark result files under
bench/results/ are outputs a run writes (their names in the docs are where to find a run's output), and
``rocketscope/<package>/...`` is the installed name of a top-level folder (setup.py maps them).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("broker", "telemetry", "trace", "rocketscope", "spark", "dashboards", "tests", "docs", "deploy", "bench",
           "peers")
MAPPED = ("broker", "telemetry", "trace", "spark", "dashboards")  # rocketscope/<name>/... is <name>/... (setup.py)
SUFFIXES = (".py", ".md", ".yml", ".yaml", ".json", ".conf", ".sh", ".toml", ".proto", ".txt", ".java", ".go")
_FOLDER = "|".join(FOLDERS)
_SUFFIX = "|".join(s[1:] for s in SUFFIXES)
CITATION = re.compile(rf"(?<![\w/.-])((?:{_FOLDER})/[\w./-]*\.(?:{_SUFFIX}))(?![\w/])")
# (citing file, cited path): mentions of a file that deliberately does not exist, each with why
ABSENT_ON_PURPOSE = {
    # "trace/instrument.py?": the doc explains why the function is not in a module of that name
    ("docs/TRACE.md", "trace/instrument.py"),
}


def citing_files() -> list[Path]:
    """Source, docs and deploy files; not benchmark results (records of runs, whose profiles name the modules of
    their day) and not this file (its self-test cites missing files on purpose)."""
    results, me = ROOT / "bench" / "results", Path(__file__).resolve()
    files = [p for d in FOLDERS for p in (ROOT / d).rglob("*")
             if p.is_file() and p.suffix in SUFFIXES and "_pb2" not in p.name and "__pycache__" not in p.parts
             and results not in p.parents and p != me]
    return files + [ROOT / n for n in ("README.md", "Makefile", "pyproject.toml", "setup.py")]


def exists(cited: str) -> bool:
    if cited.startswith("bench/results/"):
        return True
    parts = cited.split("/")
    if parts[0] == "rocketscope" and len(parts) > 2 and parts[1] in MAPPED:
        cited = "/".join(parts[1:])
    return (ROOT / cited).exists()


def dangling(files: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """(citing file, cited path) for every citation in ``files`` ((name, text) pairs) of a file that is not there."""
    return {(name, m.group(1)) for name, text in files for m in CITATION.finditer(text)
            if not exists(m.group(1)) and (name, m.group(1)) not in ABSENT_ON_PURPOSE}


def test_every_cited_file_exists() -> None:
    files = [(str(p.relative_to(ROOT)), p.read_text(errors="replace")) for p in citing_files()]
    found = dangling(files)
    assert not found, "citations of files that are not in the repository (fix the path or the comment):\n" + \
        "\n".join(f"  {name}: {cited}" for name, cited in sorted(found))


def test_the_check_finds_a_dangling_citation() -> None:
    """The check itself: a renamed test, a removed module and a doc are caught; existing files, benchmark
    outputs, installed package paths and prose without a file extension are not."""
    found = dangling([
        ("a.py", "# pinned by tests/test_spark_plans.py (counts them)"),
        ("b.md", "see `broker/config.py` and docs/DESIGN.md, or docs/ARCHITECTURE.md"),
        ("c.py", "# written to bench/results/run.json; rocketscope/trace/codec.py is trace/codec.py"),
        ("d.md", "the broker/name-server/controller processes; broker/raft/driver.py"),
    ])
    assert found == {("a.py", "tests/test_spark_plans.py"), ("b.md", "broker/config.py"), ("b.md", "docs/DESIGN.md")}
