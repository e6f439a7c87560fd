from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RaftEntry(_message.Message):
    __slots__ = ("index", "term", "kind", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    kind: int
    data: bytes
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., kind: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class RaftMessage(_message.Message):
    __slots__ = ("type", "frm", "to", "term", "log_term", "index", "entries", "commit", "reject", "reject_hint", "force")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FRM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    REJECT_HINT_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    type: int
    frm: str
    to: str
    term: int
    log_term: int
    index: int
    entries: _containers.RepeatedCompositeFieldContainer[RaftEntry]
    commit: int
    reject: bool
    reject_hint: int
    force: bool
    def __init__(self, type: _Optional[int] = ..., frm: _Optional[str] = ..., to: _Optional[str] = ..., term: _Optional[int] = ..., log_term: _Optional[int] = ..., index: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[RaftEntry, _Mapping]]] = ..., commit: _Optional[int] = ..., reject: _Optional[bool] = ..., reject_hint: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class RaftBatch(_message.Message):
    __slots__ = ("group", "sender", "sender_grpc_addr", "sender_admin_addr", "messages")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    SENDER_GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    SENDER_ADMIN_ADDR_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    group: str
    sender: str
    sender_grpc_addr: str
    sender_admin_addr: str
    messages: _containers.RepeatedCompositeFieldContainer[RaftMessage]
    def __init__(self, group: _Optional[str] = ..., sender: _Optional[str] = ..., sender_grpc_addr: _Optional[str] = ..., sender_admin_addr: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[RaftMessage, _Mapping]]] = ...) -> None: ...
