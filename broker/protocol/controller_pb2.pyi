from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControllerStatus(_message.Message):
    __slots__ = ("code", "remark", "leader_id", "leader_addr")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    leader_id: str
    leader_addr: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ...) -> None: ...

class Replica(_message.Message):
    __slots__ = ("broker_id", "address", "ha_address", "grpc_address", "alive", "epoch", "max_offset", "confirm_offset", "election_priority")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    ha_address: str
    grpc_address: str
    alive: bool
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., ha_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., alive: _Optional[bool] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., election_priority: _Optional[int] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "master_broker_id", "master_epoch", "sync_state_set_epoch", "sync_state_set", "replicas")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., master_broker_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ...) -> None: ...

class ControllerResponse(_message.Message):
    __slots__ = ("status", "info", "broker_id", "infos")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INFOS_FIELD_NUMBER: _ClassVar[int]
    status: ControllerStatus
    info: ReplicaInfo
    broker_id: int
    infos: _containers.RepeatedCompositeFieldContainer[ReplicaInfo]
    def __init__(self, status: _Optional[_Union[ControllerStatus, _Mapping]] = ..., info: _Optional[_Union[ReplicaInfo, _Mapping]] = ..., broker_id: _Optional[int] = ..., infos: _Optional[_Iterable[_Union[ReplicaInfo, _Mapping]]] = ...) -> None: ...

class BrokerSetRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ...) -> None: ...

class ApplyBrokerIdRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "register_check_code")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTER_CHECK_CODE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., register_check_code: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "address", "ha_address", "grpc_address")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str
    grpc_address: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., ha_address: _Optional[str] = ..., grpc_address: _Optional[str] = ...) -> None: ...

class BrokerHeartbeat(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "address", "epoch", "max_offset", "confirm_offset", "heartbeat_timeout_ms", "election_priority")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    heartbeat_timeout_ms: int
    election_priority: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ..., election_priority: _Optional[int] = ...) -> None: ...

class AlterSyncStateSetRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "master_broker_id", "master_epoch", "sync_state_set", "sync_state_set_epoch")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., master_broker_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ...) -> None: ...

class ElectMasterRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "designate_elect")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    DESIGNATE_ELECT_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    designate_elect: bool
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., designate_elect: _Optional[bool] = ...) -> None: ...

class SyncStateDataRequest(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class MetaDataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ControllerMetaData(_message.Message):
    __slots__ = ("status", "group", "self_id", "self_addr", "leader_id", "leader_addr", "is_leader", "role", "term", "commit_index", "peers", "elections", "active_brokers")
    class PeersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SELF_ID_FIELD_NUMBER: _ClassVar[int]
    SELF_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: ControllerStatus
    group: str
    self_id: str
    self_addr: str
    leader_id: str
    leader_addr: str
    is_leader: bool
    role: str
    term: int
    commit_index: int
    peers: _containers.ScalarMap[str, str]
    elections: int
    active_brokers: int
    def __init__(self, status: _Optional[_Union[ControllerStatus, _Mapping]] = ..., group: _Optional[str] = ..., self_id: _Optional[str] = ..., self_addr: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ..., is_leader: _Optional[bool] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., peers: _Optional[_Mapping[str, str]] = ..., elections: _Optional[int] = ..., active_brokers: _Optional[int] = ...) -> None: ...

class BrokerEpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class BrokerEpochRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerEpochCache(_message.Message):
    __slots__ = ("status", "cluster_name", "broker_name", "broker_id", "max_offset", "confirm_offset", "entries", "role", "master_epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: ControllerStatus
    cluster_name: str
    broker_name: str
    broker_id: int
    max_offset: int
    confirm_offset: int
    entries: _containers.RepeatedCompositeFieldContainer[BrokerEpochEntry]
    role: str
    master_epoch: int
    def __init__(self, status: _Optional[_Union[ControllerStatus, _Mapping]] = ..., cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[BrokerEpochEntry, _Mapping]]] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ...) -> None: ...
