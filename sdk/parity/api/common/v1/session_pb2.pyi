from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_OPEN: _ClassVar[SessionState]
    SESSION_STATE_CLOSED: _ClassVar[SessionState]

class SessionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_OUTCOME_UNSPECIFIED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_SUCCEEDED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_FAILED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_TIMED_OUT: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_CANCELLED: _ClassVar[SessionOutcome]
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_OPEN: SessionState
SESSION_STATE_CLOSED: SessionState
SESSION_OUTCOME_UNSPECIFIED: SessionOutcome
SESSION_OUTCOME_SUCCEEDED: SessionOutcome
SESSION_OUTCOME_FAILED: SessionOutcome
SESSION_OUTCOME_TIMED_OUT: SessionOutcome
SESSION_OUTCOME_CANCELLED: SessionOutcome

class Session(_message.Message):
    __slots__ = ("session_id", "parent_session_ids", "metadata", "state", "outcome", "error_message", "call_count", "create_time", "update_time", "close_time", "end_user_id", "tags")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CLOSE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    parent_session_ids: _containers.RepeatedScalarFieldContainer[str]
    metadata: _containers.ScalarMap[str, str]
    state: SessionState
    outcome: SessionOutcome
    error_message: str
    call_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    close_time: _timestamp_pb2.Timestamp
    end_user_id: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., parent_session_ids: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[SessionState, str]] = ..., outcome: _Optional[_Union[SessionOutcome, str]] = ..., error_message: _Optional[str] = ..., call_count: _Optional[int] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., close_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_user_id: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...
