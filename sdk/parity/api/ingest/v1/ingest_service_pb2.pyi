from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from parity.api.auth.v1 import auth_pb2 as _auth_pb2
from parity.api.ingest.v1 import replica_pb2 as _replica_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("request_count", "error_count", "in_flight", "capture_queue_depth", "spool_size", "captured_call_count", "paused", "policy_version", "start_time", "policy_model", "lora_adapter", "joining", "held", "canary_share", "canary_policy_version", "canary_upstreams", "routes")
    REQUEST_COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    SPOOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    POLICY_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_FIELD_NUMBER: _ClassVar[int]
    JOINING_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    CANARY_SHARE_FIELD_NUMBER: _ClassVar[int]
    CANARY_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANARY_UPSTREAMS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    request_count: int
    error_count: int
    in_flight: int
    capture_queue_depth: int
    spool_size: int
    captured_call_count: int
    paused: bool
    policy_version: int
    start_time: _timestamp_pb2.Timestamp
    policy_model: str
    lora_adapter: str
    joining: bool
    held: int
    canary_share: float
    canary_policy_version: int
    canary_upstreams: _containers.RepeatedScalarFieldContainer[str]
    routes: _containers.RepeatedCompositeFieldContainer[PolicyRoute]
    def __init__(self, request_count: _Optional[int] = ..., error_count: _Optional[int] = ..., in_flight: _Optional[int] = ..., capture_queue_depth: _Optional[int] = ..., spool_size: _Optional[int] = ..., captured_call_count: _Optional[int] = ..., paused: bool = ..., policy_version: _Optional[int] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., policy_model: _Optional[str] = ..., lora_adapter: _Optional[str] = ..., joining: bool = ..., held: _Optional[int] = ..., canary_share: _Optional[float] = ..., canary_policy_version: _Optional[int] = ..., canary_upstreams: _Optional[_Iterable[str]] = ..., routes: _Optional[_Iterable[_Union[PolicyRoute, _Mapping]]] = ...) -> None: ...

class PolicyRoute(_message.Message):
    __slots__ = ("policy_model", "lora_adapter", "policy_version", "paused")
    POLICY_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    policy_model: str
    lora_adapter: str
    policy_version: int
    paused: bool
    def __init__(self, policy_model: _Optional[str] = ..., lora_adapter: _Optional[str] = ..., policy_version: _Optional[int] = ..., paused: bool = ...) -> None: ...

class ListReplicasRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "model")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    model: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ListReplicasResponse(_message.Message):
    __slots__ = ("replicas", "next_page_token")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedCompositeFieldContainer[_replica_pb2.Replica]
    next_page_token: str
    def __init__(self, replicas: _Optional[_Iterable[_Union[_replica_pb2.Replica, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseTrafficRequest(_message.Message):
    __slots__ = ("reason", "drain_timeout", "policy_model")
    REASON_FIELD_NUMBER: _ClassVar[int]
    DRAIN_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    POLICY_MODEL_FIELD_NUMBER: _ClassVar[int]
    reason: str
    drain_timeout: _duration_pb2.Duration
    policy_model: str
    def __init__(self, reason: _Optional[str] = ..., drain_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., policy_model: _Optional[str] = ...) -> None: ...

class PauseTrafficResponse(_message.Message):
    __slots__ = ("drained_count", "pause_time")
    DRAINED_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAUSE_TIME_FIELD_NUMBER: _ClassVar[int]
    drained_count: int
    pause_time: _timestamp_pb2.Timestamp
    def __init__(self, drained_count: _Optional[int] = ..., pause_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResumeTrafficRequest(_message.Message):
    __slots__ = ("policy_model",)
    POLICY_MODEL_FIELD_NUMBER: _ClassVar[int]
    policy_model: str
    def __init__(self, policy_model: _Optional[str] = ...) -> None: ...

class ResumeTrafficResponse(_message.Message):
    __slots__ = ("paused_duration",)
    PAUSED_DURATION_FIELD_NUMBER: _ClassVar[int]
    paused_duration: _duration_pb2.Duration
    def __init__(self, paused_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SetPolicyVersionRequest(_message.Message):
    __slots__ = ("policy_version", "lora_adapter", "policy_model", "route")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_FIELD_NUMBER: _ClassVar[int]
    POLICY_MODEL_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    lora_adapter: str
    policy_model: str
    route: bool
    def __init__(self, policy_version: _Optional[int] = ..., lora_adapter: _Optional[str] = ..., policy_model: _Optional[str] = ..., route: bool = ...) -> None: ...

class SetPolicyVersionResponse(_message.Message):
    __slots__ = ("previous_policy_version",)
    PREVIOUS_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    previous_policy_version: int
    def __init__(self, previous_policy_version: _Optional[int] = ...) -> None: ...

class SetCanaryRequest(_message.Message):
    __slots__ = ("upstreams", "share", "policy_version")
    UPSTREAMS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    upstreams: _containers.RepeatedScalarFieldContainer[str]
    share: float
    policy_version: int
    def __init__(self, upstreams: _Optional[_Iterable[str]] = ..., share: _Optional[float] = ..., policy_version: _Optional[int] = ...) -> None: ...

class SetCanaryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
