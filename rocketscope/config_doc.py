"""Generate docs/CONFIG.md from the key declarations: `python -m rocketscope.config_doc > docs/CONFIG.md`."""

from __future__ import annotations

from rocketscope.broker.broker_config import BROKER_KEYS
from rocketscope.broker.controller.config import CONTROLLER_KEYS
from rocketscope.broker.namesrv.server import NAMESRV_KEYS
from rocketscope.config import keys_table


def render() -> str:
    return "\n".join([
        "# Configuration keys",
        "",
        "Generated from the code by `python -m rocketscope.config_doc`; a test fails when this file is stale.",
        "Config files are Java-properties files with RocketMQ's key names. An unknown key is logged as a",
        "warning naming it; a bad value stops start-up with an error naming key and value.",
        "Telemetry keys (metricsExporterType and friends) are documented in METRICS.md.",
        "",
        "## Name server (`rocketscope namesrv -c namesrv.conf`)",
        "",
        keys_table(NAMESRV_KEYS),
        "",
        "## Broker (`rocketscope broker -c broker.conf`)",
        "",
        keys_table(BROKER_KEYS),
        "",
        "## Controller (`rocketscope controller -c controller.conf`)",
        "",
        "A name server with `enableControllerInNamesrv=true` also runs a controller: its client service on the",
        "name server's port, its Raft on the port `controllerDLegerPeers` gives it; the controller keys below",
        "(but listenPort, listenHost and scanNotActiveBrokerInterval, which are the name server's) go in the",
        "name server's file.",
        "Broker-side controller-mode keys (enableControllerMode, controllerAddr, ...) are in the broker table.",
        "See CONTROLLER.md.",
        "",
        keys_table(CONTROLLER_KEYS),
        "",
    ])


if __name__ == "__main__":
    print(render(), end="")
