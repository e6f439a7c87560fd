"""Shared helpers of the store tests that build a ``MessageStore`` on a temporary directory."""

from __future__ import annotations

import contextlib
import os

from rocketscope.broker.store.message_store import MessageStore


def close_store(store: MessageStore) -> None:
    """Release every file of ``store`` even when a value it holds cannot be written (the header of an index file
    given a timestamp that is not a number): the equivalence tests feed stores damaged and random input."""
    for cq in store.cqs.values():
        with contextlib.suppress(Exception):
            cq.close()
    for f in store.index.files:
        with contextlib.suppress(Exception):
            f.flush()
        f.mm.close()
        os.close(f.fd)
    store.commit_log.close()
