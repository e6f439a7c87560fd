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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"broker": "broker", "telemetry": "telemetry", "trace": "trace", "spark": "spark",
            "dashboards": "dashboards"}

COMMON = ("rocketscope.names", "rocketscope.config", "rocketscope.ports", "rocketscope.logs",
          "rocketscope.broker.protocol", "rocketscope.broker.ha.events", "rocketscope.broker.security.tls",
          "rocketscope.broker.security.signature", "rocketscope.broker.security.peer_auth")
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
    # the controller's admin commands are CLI code living beside the controller; they share the CLI's channel
    ("rocketscope.broker.controller.admin_commands", "rocketscope.admin_cli"),
    # the remoting client reuses the broker's frame codec and connection, and its message conversion
    ("rocketscope.remoting_client", "rocketscope.broker.remoting.client"),
    ("rocketscope.remoting_client", "rocketscope.broker.remoting.codec"),
    ("rocketscope.remoting_client", "rocketscope.broker.convert"),
    ("rocketscope.remoting_client", "rocketscope.broker.store.record"),
}


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


def imports(path: Path, module: str) -> set[str]:
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}  # `from pkg import module`
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
