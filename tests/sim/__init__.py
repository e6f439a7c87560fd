"""Deterministic simulator of the Raft core (broker/raft): seeded fault schedules, invariants, replay.

Run ``.venv/bin/python tests/sim/run.py --help``; docs/RAFT.md explains what it checks.
"""
