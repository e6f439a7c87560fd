"""Who may import whom (docs/ARCHITECTURE.md, "Layers"): the rule is checked on every module's imports.

Components, bottom to top; a module may import its own component and the ones its row allows:

* common: RocketMQ's names, config parsing, ports, logging, the generated protocol modules, the HA
  event schema and the TLS/signature helpers (imports only common);
* telemetry: the OpenTelemetry pipeline (common);
* clients: the admin client, the topic reader, the remoting client (common);
* trace: trace codec, dispatcher, timeline, lookup (common, telemetry, clients);
* broker: name server, broker, controller, container (common, telemetry, trace);
* spark and dashboards: analytics and pages (common, trace, clients; dashboards also spark);
* the CLI, demo and admin commands on top (anything).

KNOWN lists the imports that break the rule today, each with why it is still there: the test fails
when a new one appears, and also when a listed one is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"broker": "broker", "telemetry": "telemetry", "trace": "trace", "spark": "spark",
            "dashboards": "dashboards"}

COMMON = ("rocketscope.names", "rocketscope.config", "rocketscope.ports", "rocketscope.logs",
          "rocketscope.broker.protocol", "rocketscope.ha_events", "rocketscope.tls",
          "rocketscope.signature", "rocketscope.peer_auth")
CLIENTS = ("rocketscope.admin_client", "rocketscope.topic_reader", "rocketscope.remoting_client")
TOP = ("rocketscope.cli", "rocketscope.config_doc", "rocketscope.demo", "rocketscope.admin_cli",
       "rocketscope.admin_cli_ops", "rocketscope.lazy_group", "rocketscope.procs")

ALLOWED = {
    "common": {"common"},
    "telemetry": {"common", "telemetry"},
    "clients": {"common", "clients"},
    "trace": {"common", "telemetry", "clients", "trace"},
    "broker": {"common", "telemetry", "trace", "broker"},
    "spark": {"common", "trace", "clients", "spark"},
    "dashboards": {"common", "trace", "clients", "spark", "dashboards"},
    "top": {"common", "telemetry", "clients", "trace", "broker", "spark", "dashboards", "top"},
}

KNOWN = {
    # the remoting client reuses the broker's frame codec and connection, and its message conversion
    ("rocketscope.remoting_client", "rocketscope.broker.remoting.client"),
    ("rocketscope.remoting_client", "rocketscope.broker.remoting.codec"),
    ("rocketscope.remoting_client", "rocketscope.broker.convert"),
    ("rocketscope.remoting_client", "rocketscope.broker.store.record"),
}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A source file's tree, parsed once for every check of this file."""
    return ast.parse(path.read_text(), str(path))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] == "rocketscope":
        return ".".join(parts)
    return "rocketscope." + ".".join(parts)


def component(module: str) -> str | None:
    if not module.startswith("rocketscope"):
        return None
    for prefix in COMMON:
        if module == prefix or module.startswith(prefix + "."):
            return "common"
    for prefix in CLIENTS:
        if module == prefix or module.startswith(prefix + "."):
            return "clients"
    for prefix in TOP:
        if module == prefix or module.startswith(prefix + "."):
            return "top"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in PACKAGES:
        return parts[1]
    return "top" if module != "rocketscope" else "common"


def from_import_targets(node: ast.ImportFrom, package: str) -> set[str]:
    """The module a ``from … import …`` names (relative ones resolved against ``package``), and each
    imported name under it (``from pkg import module`` imports a module)."""
    if node.level:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return {target} | {f"{target}.{a.name}" for a in node.names}


def imports(path: Path, module: str) -> set[str]:
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out |= from_import_targets(node, package)
    return {m for m in out if m.startswith("rocketscope")}


def source_files() -> list[Path]:
    files = [p for d in [*PACKAGES, "rocketscope"] for p in (ROOT / d).rglob("*.py")]
    return [p for p in files if "_pb2" not in p.name]


def known_module(name: str, modules: set[str]) -> str:
    """``from pkg import name`` names a module or an attribute: the longest real module it is in."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def violations() -> set[tuple[str, str]]:
    files = source_files()
    modules = {module_name(p) for p in files} | {"rocketscope.broker.protocol"}
    found: set[tuple[str, str]] = set()
    for path in files:
        src = module_name(path)
        own = component(src)
        assert own is not None
        for target in imports(path, src):
            target = known_module(target, modules)
            other = component(target)
            if other is not None and other not in ALLOWED[own]:
                found.add((src, target))
    return found


def test_every_import_follows_the_layers_or_is_a_known_exception() -> None:
    found = violations()
    new = sorted(found - KNOWN)
    assert not new, "imports across the layers of docs/ARCHITECTURE.md (fix them, or list them in KNOWN with why):\n" \
        + "\n".join(f"  {a} imports {b}" for a, b in new)
    gone = sorted(KNOWN - found)
    assert not gone, "listed in KNOWN but no longer imported (remove them from the list):\n" + \
        "\n".join(f"  {a} -> {b}" for a, b in gone)


def test_the_common_leaf_imports_nothing_of_the_project_above_it() -> None:
    path = ROOT / "rocketscope" / "names.py"
    assert imports(path, "rocketscope.names") == set()


def test_the_common_leaf_lives_outside_the_broker() -> None:
    """Issue 17: what every layer imports is not physically in broker/ (only the generated protocol modules are)."""
    inside = [m for m in COMMON if m.startswith("rocketscope.broker.") and m != "rocketscope.broker.protocol"]
    assert not inside, f"common modules still under broker/ (move them to rocketscope/): {inside}"


# --------------------------------------------------------------------------- RocketMQ's names, defined once
# Issue 17: a reserved name (system topics and groups, the retry/DLQ prefixes) is spelled in rocketscope/names.py
# only; everything else imports it from there.  A string literal equal to one of its values, or starting with one
# of its prefixes, is a second definition (docstrings and text that merely mentions a name are not).

def _reserved_names() -> tuple[set[str], tuple[str, ...]]:
    tree = ast.parse((ROOT / "rocketscope" / "names.py").read_text())
    exact: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            exact.add(node.value.value)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            exact |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    prefixes = tuple(n for n in exact if n.startswith("%") or n.endswith("_"))
    return exact, prefixes


def _docstrings(tree: ast.Module) -> set[int]:
    """Statement-level string constants: module, class and function docstrings and attribute docstrings."""
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def reserved_name_literals(files: list[tuple[str, ast.Module]]) -> set[tuple[str, str]]:
    """(module, literal) for every string literal in ``files`` ((module, tree) pairs) that spells a reserved name."""
    exact, prefixes = _reserved_names()
    found: set[tuple[str, str]] = set()
    for module, tree in files:
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and (node.value in exact or node.value.startswith(prefixes))):
                found.add((module, node.value))
    return found


def test_rocketmq_names_are_defined_once_in_the_common_leaf() -> None:
    files = [(module_name(p), parsed(p)) for p in source_files() if module_name(p) != "rocketscope.names"]
    found = reserved_name_literals(files)
    assert not found, "RocketMQ names spelled outside rocketscope/names.py (import them from there):\n" + \
        "\n".join(f"  {m}: {v!r}" for m, v in sorted(found))


def test_a_second_definition_of_a_name_is_caught() -> None:
    """The check itself, on made-up modules: constants, defaults and f-strings count; docstrings and prose not."""
    found = reserved_name_literals([
        ("a", ast.parse('DLQ = "%DLQ%"\n')),
        ("b", ast.parse('def f(topic="RMQ_SYS_HA_EVENTS"):\n    """Reads RMQ_SYS_HA_EVENTS."""\n')),
        ("c", ast.parse('def g(group):\n    return f"%RETRY%{group}"\n')),
        ("d", ast.parse('HELP = "reads the trace topic and RMQ_SYS_HA_EVENTS"\n')),
        ("e", ast.parse('GROUP = "CID_RMQ_SYS_MINE"\n')),
    ])
    assert found == {("a", "%DLQ%"), ("b", "RMQ_SYS_HA_EVENTS"), ("c", "%RETRY%"), ("e", "CID_RMQ_SYS_MINE")}


# --------------------------------------------------------------------------- import circles in broker/
# Issue 17: no import circles in broker/.  An import counts when it runs: at module level or inside a
# function (a deferred import still closes a circle, it only hides it from import time).  Imports under
# ``if TYPE_CHECKING:`` never run, but a circle through them is still a class taking the whole Broker for its
# annotations (a service locator): none is left, every service and both front doors are given a Protocol of
# what they use (docs/ARCHITECTURE.md "Inside the broker: who gets what"), so a circle through broker/broker.py
# counts even there.


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def imported_names(tree: ast.Module, package: str, type_only_too: bool) -> set[str]:
    """What a module's code imports when it runs: module level and inside functions; ``if TYPE_CHECKING:``
    blocks only with ``type_only_too``.  Names as written (``pkg.mod`` or ``pkg.mod.attr``)."""
    out: set[str] = set()

    def visit(body: list[Any]) -> None:
        for node in body:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                if type_only_too:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                out.update(from_import_targets(node, package))
            else:  # functions, classes, try/with/for/match bodies, except handlers
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(inner)

    visit(tree.body)
    return out


def broker_import_graph(type_only_too: bool) -> dict[str, set[str]]:
    """Module -> the broker modules it imports (not its own parent packages: those always load first)."""
    files = [p for p in source_files() if module_name(p).startswith("rocketscope.broker")]
    modules = {module_name(p) for p in files} | {"rocketscope.broker.protocol"}
    graph: dict[str, set[str]] = {}
    for path in files:
        src = module_name(path)
        package = src if path.name == "__init__.py" else src.rsplit(".", 1)[0]
        parents = {src.rsplit(".", i)[0] for i in range(1, src.count(".") + 1)}
        names = imported_names(parsed(path), package, type_only_too)
        graph[src] = {t for t in (known_module(m, modules) for m in names if m.startswith("rocketscope.broker"))
                      if t != src and t not in parents and t != "rocketscope.broker.protocol"}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def test_broker_modules_import_each_other_in_no_circle() -> None:
    found = circles(broker_import_graph(type_only_too=False))
    assert not found, "import circles in broker/ (move the shared part into a module both import):\n" + "\n".join(
        "  " + " <-> ".join(sorted(c)) for c in found)


def test_no_module_takes_the_broker_class_not_even_in_annotations() -> None:
    """No circle through broker/broker.py even counting ``if TYPE_CHECKING:`` imports: a module naming ``Broker`` (or
    anything that imports broker/broker.py) in its annotations while broker/broker.py imports it fails here.  The
    parts of one front door may still name each other's classes in annotations (the remoting handlers and their
    ``RemotingBroker``): that is one component, not a service locator."""
    found = circles(broker_import_graph(type_only_too=True))
    handle = [c for c in found if "rocketscope.broker.broker" in c]
    assert not handle, "modules in a circle with broker/broker.py through annotations (give the class a Protocol " \
        "of what it uses, not the Broker):\n" + "\n".join("  " + " <-> ".join(sorted(c)) for c in handle)


def test_the_circle_finder_counts_deferred_imports_and_skips_type_only_ones() -> None:
    """The checker itself, on made-up modules: a function-level import closes a circle, a TYPE_CHECKING one not."""
    a = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
                  "def f():\n    try:\n        from .c import C\n    except ImportError:\n        pass\n")
    assert imported_names(a, "rocketscope.x", type_only_too=False) == {"typing", "typing.TYPE_CHECKING",
                                                                       "rocketscope.x.c", "rocketscope.x.c.C"}
    assert "rocketscope.x.b" in imported_names(a, "rocketscope.x", type_only_too=True)
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


# --------------------------------------------------------------------------- private state
# Issue 17: nothing reads another object's private attributes.  ``obj._name`` on anything but ``self``/``cls``
# counts (NamedTuple's public ``_asdict``/``_replace``/``_fields``/``_make`` aside), and so does importing another
# module's private name (``from .listener import _pipe``).  Broker and common modules are checked.  PRIVATE_READS
# lists what is left, each with why; the list may only shrink.
PRIVATE_READS = {
    # a MemoryStorage copying itself: the same class
    ("rocketscope.broker.raft.storage", "clone._ents"),
    # prometheus_client has no public way to pick the address family its server binds
    ("rocketscope.tls", "exposition._get_best_family"),
}
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make"}


def private_reads() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in source_files():
        module = module_name(path)
        if not (module.startswith("rocketscope.broker") or component(module) == "common"):
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("rocketscope")):
                found |= {(module, f"import {a.name}") for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")}
                continue
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if node.attr in NAMEDTUPLE_API:
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            found.add((module, ast.unparse(node)))
    return found


def test_no_broker_module_reads_another_objects_private_attributes() -> None:
    found = private_reads()
    new = sorted(found - PRIVATE_READS)
    assert not new, "private attributes read from outside their object (add a public method or property):\n" + \
        "\n".join(f"  {m}: {expr}" for m, expr in new)
    gone = sorted(PRIVATE_READS - found)
    assert not gone, f"listed in PRIVATE_READS but no longer read (remove them): {gone}"


# Issue 17 item 2, "protobuf stays in the protocol layers": which broker modules may import the gRPC v2
# protocol (rocketmq.grpc_protocol).  The gRPC front door and what only it uses do; the core does not: its
# services raise BrokerError with a protocol-neutral kind (broker/errors.py) that each door maps in one table
# (broker/grpc_errors.py, broker/remoting/errors.py), TransactionService takes a Resolution and emits a
# CheckBack, filters take RocketMQ's expression type names, and request metrics take the code's name.
# PROTOBUF_KNOWN lists core modules that still do, each with why; like KNOWN it only shrinks (it is empty).
GRPC_DOOR = {f"rocketscope.broker.{m}" for m in (
    "grpc_service", "grpc_registration", "convert", "route_view", "forwarding", "stream_revival", "slave_read",
    "pull", "validation", "client_metrics", "retry_policy", "security.interceptor",
    "grpc_errors",  # the one table from the broker's error kinds (and store statuses) to v2 codes
)}
PROTOBUF_KNOWN: set[str] = set()


def imports_grpc_protocol(path: Path) -> bool:
    for node in ast.walk(parsed(path)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n == "rocketmq.grpc_protocol" or n.startswith("rocketmq.grpc_protocol.") for n in names):
            return True
    return False


def test_protobuf_stays_in_the_grpc_front_door() -> None:
    broker = {module_name(p) for p in (ROOT / "broker").rglob("*.py") if "_pb2" not in p.name
              and "protocol" not in p.parts and imports_grpc_protocol(p)}
    new = sorted(broker - GRPC_DOOR - PROTOBUF_KNOWN)
    assert not new, f"broker modules outside the gRPC front door importing its protocol: {new}"
    gone = sorted(PROTOBUF_KNOWN - broker)
    assert not gone, f"listed in PROTOBUF_KNOWN but no longer importing the gRPC protocol (remove them): {gone}"
