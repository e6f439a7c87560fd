"""CHECK_CLIENT_CONFIG (46): a consumer asks the broker whether it can serve its subscription.

Apache's Java push consumer sends it at start for every SQL92 subscription and refuses to start on
any answer but SUCCESS, so without it a Java consumer with SQL92 cannot run.  Answers as RocketMQ's
broker: a TAG subscription is always fine; SQL92 needs enablePropertyFilter (else SYSTEM_ERROR
"The broker does not support consumer to filter message by SQL92"); an expression that does not
parse is SUBSCRIPTION_PARSE_FAILED with the reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..filter import TAG, FilterRefused, compile_filter
from .codec import RemotingCommand, ResponseCode, parse_json_body

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .server import Connection

log = logging.getLogger(__name__)
CHECK_CLIENT_CONFIG = 46  # RocketMQ's RequestCode.CHECK_CLIENT_CONFIG


def client_config_handler(settings: Settings) -> Any:
    """The handler reads only ``enablePropertyFilter`` (hot-reloadable: read at each request)."""

    async def check_client_config(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = parse_json_body(cmd.body, "CheckClientRequestBody") if cmd.body else {}
        sub = data.get("subscriptionData") if isinstance(data, dict) else None
        if not isinstance(sub, dict):
            return cmd.response()
        kind = str(sub.get("expressionType") or TAG).upper()
        if kind == TAG:
            return cmd.response()
        if not settings.enablePropertyFilter:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The broker does not support consumer to filter message by {kind}")
        try:
            compile_filter(kind, str(sub.get("subString") or ""), True)
        except FilterRefused as exc:
            log.info("client %s: subscription of group %s to %s refused: %s", data.get("clientId", ""),
                     data.get("group", ""), sub.get("topic", ""), exc.message)
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.message)
        return cmd.response()

    return check_client_config
