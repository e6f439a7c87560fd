import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UpdateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class TopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TopicConfigsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    topics: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class UpdateSubGroupRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.SubscriptionGroupConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class GroupRequest(_message.Message):
    __slots__ = ("group", "remove_offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOVE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    remove_offset: bool
    def __init__(self, group: _Optional[str] = ..., remove_offset: _Optional[bool] = ...) -> None: ...

class SubGroupsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    groups: _containers.RepeatedCompositeFieldContainer[_common_pb2.SubscriptionGroupConfig]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class StoredMessageView(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "commitlog_offset", "store_size", "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times", "properties", "body", "msg_id", "offset_msg_id", "sys_flag", "broker_name")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_size: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    properties: _containers.ScalarMap[str, str]
    body: bytes
    msg_id: str
    offset_msg_id: str
    sys_flag: int
    broker_name: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commitlog_offset: _Optional[int] = ..., store_size: _Optional[int] = ..., born_timestamp: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., msg_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., sys_flag: _Optional[int] = ..., broker_name: _Optional[str] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num", "begin_timestamp", "end_timestamp", "commitlog_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int
    commitlog_offset: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ..., commitlog_offset: _Optional[int] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("status", "messages")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessageView]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[StoredMessageView, _Mapping]]] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "inflight", "last_timestamp", "min_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    inflight: int
    last_timestamp: int
    min_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., inflight: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., min_offset: _Optional[int] = ...) -> None: ...

class ConsumerProgressRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ConsumerProgressResponse(_message.Message):
    __slots__ = ("status", "queues", "total_lag")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "language", "version", "client_type", "address", "last_seen_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    language: str
    version: str
    client_type: str
    address: str
    last_seen_ms: int
    def __init__(self, client_id: _Optional[str] = ..., language: _Optional[str] = ..., version: _Optional[str] = ..., client_type: _Optional[str] = ..., address: _Optional[str] = ..., last_seen_ms: _Optional[int] = ...) -> None: ...

class GroupsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ConsumerConnectionsResponse(_message.Message):
    __slots__ = ("status", "connections")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ...) -> None: ...

class BrokerStatusResponse(_message.Message):
    __slots__ = ("status", "table")
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    table: _containers.ScalarMap[str, str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., table: _Optional[_Mapping[str, str]] = ...) -> None: ...

class QueueOffsetsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class QueueOffsetsResponse(_message.Message):
    __slots__ = ("status", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class ConsumerOffset(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsumerOffsetsResponse(_message.Message):
    __slots__ = ("status", "offsets")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class ChangeRoleRequest(_message.Message):
    __slots__ = ("role", "broker_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    role: str
    broker_id: int
    def __init__(self, role: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class HaStatusResponse(_message.Message):
    __slots__ = ("status", "json")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    json: str
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., json: _Optional[str] = ...) -> None: ...

class HaEventsRequest(_message.Message):
    __slots__ = ("max",)
    MAX_FIELD_NUMBER: _ClassVar[int]
    max: int
    def __init__(self, max: _Optional[int] = ...) -> None: ...

class HaEventsResponse(_message.Message):
    __slots__ = ("status", "events")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    events: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., events: _Optional[_Iterable[str]] = ...) -> None: ...

class AppendHaEventsRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, events: _Optional[_Iterable[str]] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "timestamp", "force", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    timestamp: int
    force: bool
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp: _Optional[int] = ..., force: _Optional[bool] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class QueueReset(_message.Message):
    __slots__ = ("topic", "queue_id", "old_offset", "new_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("status", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueReset]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueReset, _Mapping]]] = ...) -> None: ...

class ProducerConnectionsRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class BrokerConfigResponse(_message.Message):
    __slots__ = ("status", "config", "hot_reloadable")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    HOT_RELOADABLE_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    config: _containers.ScalarMap[str, str]
    hot_reloadable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., config: _Optional[_Mapping[str, str]] = ..., hot_reloadable: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateBrokerConfigRequest(_message.Message):
    __slots__ = ("config",)
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _containers.ScalarMap[str, str]
    def __init__(self, config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TopicStatsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("topic", "queue_id", "min_offset", "max_offset", "last_update_timestamp", "in_last_minute", "in_last_day")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    IN_LAST_MINUTE_FIELD_NUMBER: _ClassVar[int]
    IN_LAST_DAY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    in_last_minute: int
    in_last_day: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_update_timestamp: _Optional[int] = ..., in_last_minute: _Optional[int] = ..., in_last_day: _Optional[int] = ...) -> None: ...

class TopicStatsResponse(_message.Message):
    __slots__ = ("status", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ...) -> None: ...

class BrokerPermRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class BrokerPermResponse(_message.Message):
    __slots__ = ("status", "topic_count")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    topic_count: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., topic_count: _Optional[int] = ...) -> None: ...

class MessageRequestMode(_message.Message):
    __slots__ = ("topic", "group", "mode", "pop_share_queue_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POP_SHARE_QUEUE_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    mode: str
    pop_share_queue_num: int
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., mode: _Optional[str] = ..., pop_share_queue_num: _Optional[int] = ...) -> None: ...

class MessageRequestModesResponse(_message.Message):
    __slots__ = ("status", "modes")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    modes: _containers.RepeatedCompositeFieldContainer[MessageRequestMode]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., modes: _Optional[_Iterable[_Union[MessageRequestMode, _Mapping]]] = ...) -> None: ...

class AddBrokerRequest(_message.Message):
    __slots__ = ("config_path",)
    CONFIG_PATH_FIELD_NUMBER: _ClassVar[int]
    config_path: str
    def __init__(self, config_path: _Optional[str] = ...) -> None: ...

class RemoveBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class ContainerBroker(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "role", "grpc_addr", "admin_addr", "config_path")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    ADMIN_ADDR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_PATH_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    role: str
    grpc_addr: str
    admin_addr: str
    config_path: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., grpc_addr: _Optional[str] = ..., admin_addr: _Optional[str] = ..., config_path: _Optional[str] = ...) -> None: ...

class ContainerStatusResponse(_message.Message):
    __slots__ = ("status", "brokers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    brokers: _containers.RepeatedCompositeFieldContainer[ContainerBroker]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., brokers: _Optional[_Iterable[_Union[ContainerBroker, _Mapping]]] = ...) -> None: ...
