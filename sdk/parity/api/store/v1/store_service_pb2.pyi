from google.protobuf import timestamp_pb2 as _timestamp_pb2
from parity.api.auth.v1 import auth_pb2 as _auth_pb2
from parity.api.common.v1 import llm_call_pb2 as _llm_call_pb2
from parity.api.common.v1 import reward_pb2 as _reward_pb2
from parity.api.common.v1 import session_pb2 as _session_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CallView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_VIEW_UNSPECIFIED: _ClassVar[CallView]
    CALL_VIEW_BASIC: _ClassVar[CallView]
    CALL_VIEW_FULL: _ClassVar[CallView]
    CALL_VIEW_SPLICED: _ClassVar[CallView]

class SessionOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_ORDER_UNSPECIFIED: _ClassVar[SessionOrder]
    SESSION_ORDER_OLDEST_FIRST: _ClassVar[SessionOrder]
    SESSION_ORDER_NEWEST_FIRST: _ClassVar[SessionOrder]
CALL_VIEW_UNSPECIFIED: CallView
CALL_VIEW_BASIC: CallView
CALL_VIEW_FULL: CallView
CALL_VIEW_SPLICED: CallView
SESSION_ORDER_UNSPECIFIED: SessionOrder
SESSION_ORDER_OLDEST_FIRST: SessionOrder
SESSION_ORDER_NEWEST_FIRST: SessionOrder

class WriteCallsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[_llm_call_pb2.LlmCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[_llm_call_pb2.LlmCall, _Mapping]]] = ...) -> None: ...

class WriteCallsResponse(_message.Message):
    __slots__ = ("written_count", "duplicate_count")
    WRITTEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    written_count: int
    duplicate_count: int
    def __init__(self, written_count: _Optional[int] = ..., duplicate_count: _Optional[int] = ...) -> None: ...

class StreamWriteCallsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[_llm_call_pb2.LlmCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[_llm_call_pb2.LlmCall, _Mapping]]] = ...) -> None: ...

class StreamWriteCallsResponse(_message.Message):
    __slots__ = ("written_count", "duplicate_count")
    WRITTEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    written_count: int
    duplicate_count: int
    def __init__(self, written_count: _Optional[int] = ..., duplicate_count: _Optional[int] = ...) -> None: ...

class GetCallRequest(_message.Message):
    __slots__ = ("call_id", "view")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    view: CallView
    def __init__(self, call_id: _Optional[str] = ..., view: _Optional[_Union[CallView, str]] = ...) -> None: ...

class GetCallResponse(_message.Message):
    __slots__ = ("call",)
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: _llm_call_pb2.LlmCall
    def __init__(self, call: _Optional[_Union[_llm_call_pb2.LlmCall, _Mapping]] = ...) -> None: ...

class ListCallsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token", "view")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    view: CallView
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., view: _Optional[_Union[CallView, str]] = ...) -> None: ...

class ListCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[_llm_call_pb2.LlmCall]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[_llm_call_pb2.LlmCall, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchCallsRequest(_message.Message):
    __slots__ = ("cursor", "view", "max_batch_size", "from_latest")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    FROM_LATEST_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    view: CallView
    max_batch_size: int
    from_latest: bool
    def __init__(self, cursor: _Optional[str] = ..., view: _Optional[_Union[CallView, str]] = ..., max_batch_size: _Optional[int] = ..., from_latest: bool = ...) -> None: ...

class WatchCallsResponse(_message.Message):
    __slots__ = ("calls", "cursor")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[_llm_call_pb2.LlmCall]
    cursor: str
    def __init__(self, calls: _Optional[_Iterable[_Union[_llm_call_pb2.LlmCall, _Mapping]]] = ..., cursor: _Optional[str] = ...) -> None: ...

class WriteRewardsRequest(_message.Message):
    __slots__ = ("rewards",)
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    rewards: _containers.RepeatedCompositeFieldContainer[_reward_pb2.Reward]
    def __init__(self, rewards: _Optional[_Iterable[_Union[_reward_pb2.Reward, _Mapping]]] = ...) -> None: ...

class WriteRewardsResponse(_message.Message):
    __slots__ = ("written_count", "duplicate_count")
    WRITTEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    written_count: int
    duplicate_count: int
    def __init__(self, written_count: _Optional[int] = ..., duplicate_count: _Optional[int] = ...) -> None: ...

class ListRewardsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRewardsResponse(_message.Message):
    __slots__ = ("rewards", "next_page_token")
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rewards: _containers.RepeatedCompositeFieldContainer[_reward_pb2.Reward]
    next_page_token: str
    def __init__(self, rewards: _Optional[_Iterable[_Union[_reward_pb2.Reward, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "parent_session_id", "order", "outcome", "metadata", "session_id_prefix", "end_user_id", "tags")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: _session_pb2.SessionState
    parent_session_id: str
    order: SessionOrder
    outcome: _session_pb2.SessionOutcome
    metadata: _containers.ScalarMap[str, str]
    session_id_prefix: str
    end_user_id: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[_session_pb2.SessionState, str]] = ..., parent_session_id: _Optional[str] = ..., order: _Optional[_Union[SessionOrder, str]] = ..., outcome: _Optional[_Union[_session_pb2.SessionOutcome, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., session_id_prefix: _Optional[str] = ..., end_user_id: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_session_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_session_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id", "outcome", "error_message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    outcome: _session_pb2.SessionOutcome
    error_message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., outcome: _Optional[_Union[_session_pb2.SessionOutcome, str]] = ..., error_message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class WatchClosedSessionsRequest(_message.Message):
    __slots__ = ("cursor", "max_batch_size")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    max_batch_size: int
    def __init__(self, cursor: _Optional[str] = ..., max_batch_size: _Optional[int] = ...) -> None: ...

class WatchClosedSessionsResponse(_message.Message):
    __slots__ = ("sessions", "cursor")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_session_pb2.Session]
    cursor: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_session_pb2.Session, _Mapping]]] = ..., cursor: _Optional[str] = ...) -> None: ...

class BatchGetSessionsRequest(_message.Message):
    __slots__ = ("session_ids", "view")
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    view: CallView
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ..., view: _Optional[_Union[CallView, str]] = ...) -> None: ...

class SessionContents(_message.Message):
    __slots__ = ("session", "calls", "rewards", "prompt_splices")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_SPLICES_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    calls: _containers.RepeatedCompositeFieldContainer[_llm_call_pb2.LlmCall]
    rewards: _containers.RepeatedCompositeFieldContainer[_reward_pb2.Reward]
    prompt_splices: _containers.RepeatedCompositeFieldContainer[PromptSplice]
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., calls: _Optional[_Iterable[_Union[_llm_call_pb2.LlmCall, _Mapping]]] = ..., rewards: _Optional[_Iterable[_Union[_reward_pb2.Reward, _Mapping]]] = ..., prompt_splices: _Optional[_Iterable[_Union[PromptSplice, _Mapping]]] = ...) -> None: ...

class PromptSplice(_message.Message):
    __slots__ = ("call_id", "base_call_id", "base_choice", "prefix_token_count", "suffix_token_count", "middle_token_ids")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    base_call_id: str
    base_choice: int
    prefix_token_count: int
    suffix_token_count: int
    middle_token_ids: bytes
    def __init__(self, call_id: _Optional[str] = ..., base_call_id: _Optional[str] = ..., base_choice: _Optional[int] = ..., prefix_token_count: _Optional[int] = ..., suffix_token_count: _Optional[int] = ..., middle_token_ids: _Optional[bytes] = ...) -> None: ...

class BatchGetSessionsResponse(_message.Message):
    __slots__ = ("sessions", "missing_session_ids")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MISSING_SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionContents]
    missing_session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionContents, _Mapping]]] = ..., missing_session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionMetadataUpdate(_message.Message):
    __slots__ = ("session_id", "metadata", "remove_keys")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REMOVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    metadata: _containers.ScalarMap[str, str]
    remove_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., remove_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateSessionMetadataRequest(_message.Message):
    __slots__ = ("updates",)
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[SessionMetadataUpdate]
    def __init__(self, updates: _Optional[_Iterable[_Union[SessionMetadataUpdate, _Mapping]]] = ...) -> None: ...

class UpdateSessionMetadataResponse(_message.Message):
    __slots__ = ("updated_count",)
    UPDATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    updated_count: int
    def __init__(self, updated_count: _Optional[int] = ...) -> None: ...

class DeleteSessionsRequest(_message.Message):
    __slots__ = ("session_ids", "updated_before", "end_user_id")
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    updated_before: _timestamp_pb2.Timestamp
    end_user_id: str
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ..., updated_before: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_user_id: _Optional[str] = ...) -> None: ...

class DeleteSessionsResponse(_message.Message):
    __slots__ = ("deleted_session_count", "deleted_call_count", "deleted_reward_count")
    DELETED_SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETED_CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETED_REWARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_session_count: int
    deleted_call_count: int
    deleted_reward_count: int
    def __init__(self, deleted_session_count: _Optional[int] = ..., deleted_call_count: _Optional[int] = ..., deleted_reward_count: _Optional[int] = ...) -> None: ...

class GetStoreStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStoreStatsResponse(_message.Message):
    __slots__ = ("backend", "session_count", "call_count", "reward_count", "logical_token_count", "bytes_on_disk", "bytes_per_token")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    REWARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_ON_DISK_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    backend: str
    session_count: int
    call_count: int
    reward_count: int
    logical_token_count: int
    bytes_on_disk: int
    bytes_per_token: float
    def __init__(self, backend: _Optional[str] = ..., session_count: _Optional[int] = ..., call_count: _Optional[int] = ..., reward_count: _Optional[int] = ..., logical_token_count: _Optional[int] = ..., bytes_on_disk: _Optional[int] = ..., bytes_per_token: _Optional[float] = ...) -> None: ...
