"""The per-broker message store: commit log, consume queues, index, checkpoint, recovery.

Binary formats are documented in docs/STORAGE.md.
"""
