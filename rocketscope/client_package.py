"""Server processes register the official client's ``rocketmq`` package without running its ``__init__``.

Why: the servers use one thing from ``rocketmq-python-client``: its generated v2 protobuf modules,
``rocketmq.grpc_protocol``.  Importing any submodule runs the package's ``__init__`` first, and that
imports the whole client and its OpenTelemetry exporters: 127 modules, 0.17 of the 1.36 CPU seconds
that ``python -c "import rocketscope.broker.broker"`` took (means of 5 runs at load 6, session 12),
paid by every broker, name server, controller and container start, hundreds of times per test run.

:func:`defer_client_init` puts a package module with the real ``__path__`` into ``sys.modules``, so
``import rocketmq.grpc_protocol`` loads just that subpackage.  The first lookup of anything else on
the package (``from rocketmq import Producer``) runs the real ``__init__`` then, in the same module
object, so code that does need the client sees the package as if it had been imported normally.  Only the server
commands of ``rocketscope`` call it, before they import the broker; a process that imported
``rocketmq`` already is left alone.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

PACKAGE = "rocketmq"


class _DeferredPackage(types.ModuleType):
    """A package whose ``__init__`` runs on the first lookup of an attribute it does not have yet."""

    def __getattr__(self, name: str) -> Any:  # called only for attributes not (yet) set
        state = self.__dict__
        if state.get("_rocketscope_initialised"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        state["_rocketscope_initialised"] = True
        spec = state["__spec__"]
        spec.loader.exec_module(self)
        return getattr(self, name)


def defer_client_init() -> bool:
    """Register ``rocketmq`` with its ``__init__`` deferred; False when it is imported already or missing."""
    if PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    module = _DeferredPackage(PACKAGE)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    module.__package__ = PACKAGE
    module.__path__ = list(spec.submodule_search_locations)
    sys.modules[PACKAGE] = module
    return True
