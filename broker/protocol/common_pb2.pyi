from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Status(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_message_orderly", "retry_max_times", "retry_queue_nums", "consume_broadcast_enable", "which_broker_when_consume_slowly", "attributes", "group_retry_policy")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    WHICH_BROKER_WHEN_CONSUME_SLOWLY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    GROUP_RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_message_orderly: bool
    retry_max_times: int
    retry_queue_nums: int
    consume_broadcast_enable: bool
    which_broker_when_consume_slowly: int
    attributes: _containers.ScalarMap[str, str]
    group_retry_policy: str
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_message_orderly: _Optional[bool] = ..., retry_max_times: _Optional[int] = ..., retry_queue_nums: _Optional[int] = ..., consume_broadcast_enable: _Optional[bool] = ..., which_broker_when_consume_slowly: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ..., group_retry_policy: _Optional[str] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("timestamp", "counter")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    counter: int
    def __init__(self, timestamp: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...
