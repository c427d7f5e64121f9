from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CallKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_KIND_UNSPECIFIED: _ClassVar[CallKind]
    CALL_KIND_POLICY: _ClassVar[CallKind]
    CALL_KIND_EXTERNAL: _ClassVar[CallKind]

class CallEndpoint(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_ENDPOINT_UNSPECIFIED: _ClassVar[CallEndpoint]
    CALL_ENDPOINT_CHAT_COMPLETIONS: _ClassVar[CallEndpoint]
    CALL_ENDPOINT_COMPLETIONS: _ClassVar[CallEndpoint]
    CALL_ENDPOINT_ANTHROPIC_MESSAGES: _ClassVar[CallEndpoint]
    CALL_ENDPOINT_RESPONSES: _ClassVar[CallEndpoint]

class CallOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_OUTCOME_UNSPECIFIED: _ClassVar[CallOutcome]
    CALL_OUTCOME_SUCCEEDED: _ClassVar[CallOutcome]
    CALL_OUTCOME_UPSTREAM_ERROR: _ClassVar[CallOutcome]
    CALL_OUTCOME_CLIENT_DISCONNECTED: _ClassVar[CallOutcome]
    CALL_OUTCOME_SESSION_CAPPED: _ClassVar[CallOutcome]

class HistoryMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HISTORY_MODE_UNSPECIFIED: _ClassVar[HistoryMode]
    HISTORY_MODE_AS_DEPLOYED: _ClassVar[HistoryMode]
    HISTORY_MODE_EXACT_HISTORY: _ClassVar[HistoryMode]
CALL_KIND_UNSPECIFIED: CallKind
CALL_KIND_POLICY: CallKind
CALL_KIND_EXTERNAL: CallKind
CALL_ENDPOINT_UNSPECIFIED: CallEndpoint
CALL_ENDPOINT_CHAT_COMPLETIONS: CallEndpoint
CALL_ENDPOINT_COMPLETIONS: CallEndpoint
CALL_ENDPOINT_ANTHROPIC_MESSAGES: CallEndpoint
CALL_ENDPOINT_RESPONSES: CallEndpoint
CALL_OUTCOME_UNSPECIFIED: CallOutcome
CALL_OUTCOME_SUCCEEDED: CallOutcome
CALL_OUTCOME_UPSTREAM_ERROR: CallOutcome
CALL_OUTCOME_CLIENT_DISCONNECTED: CallOutcome
CALL_OUTCOME_SESSION_CAPPED: CallOutcome
HISTORY_MODE_UNSPECIFIED: HistoryMode
HISTORY_MODE_AS_DEPLOYED: HistoryMode
HISTORY_MODE_EXACT_HISTORY: HistoryMode

class LlmCall(_message.Message):
    __slots__ = ("call_id", "session_id", "parent_session_ids", "trajectory_name", "metadata", "model", "policy_version", "kind", "endpoint", "request_json", "prompt_token_ids", "choices", "timings", "replica", "usage", "outcome", "error_message", "streamed", "served_model", "lora_adapter", "history_mode", "history_fallback", "session_cap", "end_user_id", "tags", "thread_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STREAMED_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MODE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    SESSION_CAP_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    session_id: str
    parent_session_ids: _containers.RepeatedScalarFieldContainer[str]
    trajectory_name: str
    metadata: _containers.ScalarMap[str, str]
    model: str
    policy_version: int
    kind: CallKind
    endpoint: CallEndpoint
    request_json: bytes
    prompt_token_ids: bytes
    choices: _containers.RepeatedCompositeFieldContainer[Choice]
    timings: CallTimings
    replica: str
    usage: TokenUsage
    outcome: CallOutcome
    error_message: str
    streamed: bool
    served_model: str
    lora_adapter: str
    history_mode: HistoryMode
    history_fallback: str
    session_cap: str
    end_user_id: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    thread_id: str
    def __init__(self, call_id: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_session_ids: _Optional[_Iterable[str]] = ..., trajectory_name: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., model: _Optional[str] = ..., policy_version: _Optional[int] = ..., kind: _Optional[_Union[CallKind, str]] = ..., endpoint: _Optional[_Union[CallEndpoint, str]] = ..., request_json: _Optional[bytes] = ..., prompt_token_ids: _Optional[bytes] = ..., choices: _Optional[_Iterable[_Union[Choice, _Mapping]]] = ..., timings: _Optional[_Union[CallTimings, _Mapping]] = ..., replica: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., outcome: _Optional[_Union[CallOutcome, str]] = ..., error_message: _Optional[str] = ..., streamed: bool = ..., served_model: _Optional[str] = ..., lora_adapter: _Optional[str] = ..., history_mode: _Optional[_Union[HistoryMode, str]] = ..., history_fallback: _Optional[str] = ..., session_cap: _Optional[str] = ..., end_user_id: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., thread_id: _Optional[str] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("index", "token_ids", "logprobs", "finish_reason", "text", "tool_calls_json", "reasoning_text", "stop_reason")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_JSON_FIELD_NUMBER: _ClassVar[int]
    REASONING_TEXT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: bytes
    logprobs: bytes
    finish_reason: str
    text: str
    tool_calls_json: bytes
    reasoning_text: str
    stop_reason: str
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[bytes] = ..., logprobs: _Optional[bytes] = ..., finish_reason: _Optional[str] = ..., text: _Optional[str] = ..., tool_calls_json: _Optional[bytes] = ..., reasoning_text: _Optional[str] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class CallTimings(_message.Message):
    __slots__ = ("start_time", "end_time", "time_to_first_token", "upstream_duration", "upstream_attempts")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_DURATION_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    time_to_first_token: _duration_pb2.Duration
    upstream_duration: _duration_pb2.Duration
    upstream_attempts: int
    def __init__(self, start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., time_to_first_token: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., upstream_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., upstream_attempts: _Optional[int] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...
