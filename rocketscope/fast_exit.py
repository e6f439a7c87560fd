"""Ending a `rocketscope` process without the interpreter's module teardown.

Why: a broker stopped by SIGTERM finished its own shutdown (``Broker.stop``, store closed) in about
0.05 s and then spent 0.6-1.3 s more in CPython's finalisation (``Py_FinalizeEx`` ->
``finalize_modules``: garbage-collecting and freeing the tens of thousands of objects gRPC, protobuf
and the OpenTelemetry SDK leave in their modules; a gdb backtrace taken during that second showed
the main thread in ``gc_collect_main`` with no Python frame left).  Every supervisor waiting for the
process to exit pays that: each broker stop or restart of an end-to-end test, a failover's
hand-over, the demo's Ctrl-C, every ``rocketscope admin`` call.  Nothing the process owns is
released by that teardown that the OS does not release anyway (memory, sockets, mmaps: the store
closes and flushes its files itself), so once the work is done, the process ends here.

What still runs, in CPython's own order, so no shutdown behaviour is lost: the threading module's
exit hooks and the join of non-daemon threads (``concurrent.futures`` workers finish their queued
work), every ``atexit`` hook (OpenTelemetry's provider shutdown, the demo's child reaper, logging's
flush), then a flush of stdout and stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from typing import NoReturn


def exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives: None is 0, an int is itself, anything else is printed
    to stderr and is 1 (CPython's ``handle_system_exit``)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def exit_process(code: object = 0) -> NoReturn:
    """End the process with ``code`` (as ``sys.exit``) after the exit hooks, without module teardown.

    Only for a process's own entry point (``rocketscope.cli.run``): called in-process (a test's
    CliRunner) it would end the test run.
    """
    status = exit_status(code)
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx calls first
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(Exception):
            shutdown()
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
