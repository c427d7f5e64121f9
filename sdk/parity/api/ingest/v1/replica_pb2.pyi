from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_HEALTH_UNSPECIFIED: _ClassVar[ReplicaHealth]
    REPLICA_HEALTH_HEALTHY: _ClassVar[ReplicaHealth]
    REPLICA_HEALTH_UNHEALTHY: _ClassVar[ReplicaHealth]
REPLICA_HEALTH_UNSPECIFIED: ReplicaHealth
REPLICA_HEALTH_HEALTHY: ReplicaHealth
REPLICA_HEALTH_UNHEALTHY: ReplicaHealth

class Replica(_message.Message):
    __slots__ = ("name", "models", "base_url", "health", "in_flight", "request_count", "error_count", "last_health_check_time", "external")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEALTH_CHECK_TIME_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    models: _containers.RepeatedScalarFieldContainer[str]
    base_url: str
    health: ReplicaHealth
    in_flight: int
    request_count: int
    error_count: int
    last_health_check_time: _timestamp_pb2.Timestamp
    external: bool
    def __init__(self, name: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., base_url: _Optional[str] = ..., health: _Optional[_Union[ReplicaHealth, str]] = ..., in_flight: _Optional[int] = ..., request_count: _Optional[int] = ..., error_count: _Optional[int] = ..., last_health_check_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., external: bool = ...) -> None: ...
