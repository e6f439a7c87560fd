"""What the remoting front door uses of the broker core (issue 17): a Protocol, not the Broker class.

The remoting handlers (broker_handlers.py, pop_handlers.py, admin_handlers.py, admin_ops_handlers.py)
translate a whole protocol onto the core, so this is most of ``Broker``'s public face: the admin
service's view (``AdminHost``, which the admin request codes hand to ``BrokerAdminService``), the
façade's send, ack and route calls, and the services the handlers drive directly.  Being a Protocol in a
module of its own, it keeps the door from importing the Broker class (no import circle through
broker/broker.py, even in annotations) and says exactly what the door may touch; mypy checks that the
Broker passed fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..admin_ops import AdminHost

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocketscope.broker.protocol import namesrv_pb2

    from ..lite import LiteService
    from ..metrics import BrokerMetrics
    from ..namesrv_client import NamesrvClient
    from ..security import AclGuard, SecurityConfig
    from ..sends import SendKind
    from ..store.message_store import PutResult
    from ..store.record import StoredMessage
    from ..topics import TopicConfig
    from ..trace_hooks import TraceHooks
    from ..transaction import TransactionService


class RemotingHost(AdminHost, Protocol):
    """The broker as the remoting handlers see it; read-only views and the façade's calls."""

    @property
    def acl_guard(self) -> AclGuard | None: ...
    @property
    def security(self) -> SecurityConfig: ...
    @property
    def lite(self) -> LiteService: ...
    @property
    def metrics(self) -> BrokerMetrics: ...
    @property
    def namesrv(self) -> NamesrvClient: ...
    @property
    def trace_hooks(self) -> TraceHooks: ...
    @property
    def transactions(self) -> TransactionService: ...
    def local_route(self, topic: str) -> namesrv_pb2.TopicRouteData | None: ...
    def writable_topic(self, name: str) -> TopicConfig | None: ...
    async def topic_for_send(self, name: str) -> TopicConfig: ...
    def select_queue(self, cfg: TopicConfig, message_group: str, client_queue: int | None = None) -> int: ...
    async def put_messages(self, stored: list[StoredMessage], kinds: list[SendKind],
                           client_id: str = "") -> list[PutResult]: ...
    @property
    def stores_plain_runs(self) -> bool: ...
    @property
    def replicates_plain_runs(self) -> bool: ...
    def put_plain_run(self, stored: list[StoredMessage]) -> bool: ...
    def put_plain_run_replicated(self, stored: list[StoredMessage], done: Callable[[bool], None]) -> bool: ...
    @property
    def proposes_plain_runs(self) -> bool: ...
    def propose_plain_run(self, stored: list[StoredMessage], done: Callable[[list[PutResult]], None]) -> None: ...
    def ack(self, group: str, handle: str, message_id: str, client_id: str = "", traced: bool = False) -> None: ...
    def change_invisible(self, group: str, handle: str, invisible_ms: int, message_id: str) -> str: ...
