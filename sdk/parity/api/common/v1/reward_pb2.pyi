from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RewardLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REWARD_LEVEL_UNSPECIFIED: _ClassVar[RewardLevel]
    REWARD_LEVEL_TRAJECTORY: _ClassVar[RewardLevel]
    REWARD_LEVEL_STEP: _ClassVar[RewardLevel]
REWARD_LEVEL_UNSPECIFIED: RewardLevel
REWARD_LEVEL_TRAJECTORY: RewardLevel
REWARD_LEVEL_STEP: RewardLevel

class Reward(_message.Message):
    __slots__ = ("reward_id", "session_id", "trajectory_name", "level", "call_id", "step_index", "value", "source", "metadata", "create_time", "name", "thread_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REWARD_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    reward_id: str
    session_id: str
    trajectory_name: str
    level: RewardLevel
    call_id: str
    step_index: int
    value: float
    source: str
    metadata: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    name: str
    thread_id: str
    def __init__(self, reward_id: _Optional[str] = ..., session_id: _Optional[str] = ..., trajectory_name: _Optional[str] = ..., level: _Optional[_Union[RewardLevel, str]] = ..., call_id: _Optional[str] = ..., step_index: _Optional[int] = ..., value: _Optional[float] = ..., source: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., name: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...
