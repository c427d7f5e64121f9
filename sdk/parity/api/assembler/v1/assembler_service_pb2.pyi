from parity.api.assembler.v1 import batch_pb2 as _batch_pb2
from parity.api.assembler.v1 import trajectory_pb2 as _trajectory_pb2
from parity.api.auth.v1 import auth_pb2 as _auth_pb2
from parity.api.common.v1 import reward_pb2 as _reward_pb2
from parity.api.common.v1 import session_pb2 as _session_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrajectoryView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAJECTORY_VIEW_UNSPECIFIED: _ClassVar[TrajectoryView]
    TRAJECTORY_VIEW_BASIC: _ClassVar[TrajectoryView]
    TRAJECTORY_VIEW_FULL: _ClassVar[TrajectoryView]

class CappedEpisodes(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPPED_EPISODES_UNSPECIFIED: _ClassVar[CappedEpisodes]
    CAPPED_EPISODES_DROP: _ClassVar[CappedEpisodes]
    CAPPED_EPISODES_ZERO_REWARD: _ClassVar[CappedEpisodes]
    CAPPED_EPISODES_KEEP_REWARD: _ClassVar[CappedEpisodes]
TRAJECTORY_VIEW_UNSPECIFIED: TrajectoryView
TRAJECTORY_VIEW_BASIC: TrajectoryView
TRAJECTORY_VIEW_FULL: TrajectoryView
CAPPED_EPISODES_UNSPECIFIED: CappedEpisodes
CAPPED_EPISODES_DROP: CappedEpisodes
CAPPED_EPISODES_ZERO_REWARD: CappedEpisodes
CAPPED_EPISODES_KEEP_REWARD: CappedEpisodes

class ReportRewardRequest(_message.Message):
    __slots__ = ("reward",)
    REWARD_FIELD_NUMBER: _ClassVar[int]
    reward: _reward_pb2.Reward
    def __init__(self, reward: _Optional[_Union[_reward_pb2.Reward, _Mapping]] = ...) -> None: ...

class ReportRewardResponse(_message.Message):
    __slots__ = ("reward_id",)
    REWARD_ID_FIELD_NUMBER: _ClassVar[int]
    reward_id: str
    def __init__(self, reward_id: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id", "outcome", "error_message", "reward", "group_id", "episode_id", "group_size", "validation", "run_id", "capped_episodes", "teacher_scored", "from_store")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CAPPED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    TEACHER_SCORED_FIELD_NUMBER: _ClassVar[int]
    FROM_STORE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    outcome: _session_pb2.SessionOutcome
    error_message: str
    reward: float
    group_id: str
    episode_id: str
    group_size: int
    validation: bool
    run_id: str
    capped_episodes: CappedEpisodes
    teacher_scored: bool
    from_store: bool
    def __init__(self, session_id: _Optional[str] = ..., outcome: _Optional[_Union[_session_pb2.SessionOutcome, str]] = ..., error_message: _Optional[str] = ..., reward: _Optional[float] = ..., group_id: _Optional[str] = ..., episode_id: _Optional[str] = ..., group_size: _Optional[int] = ..., validation: bool = ..., run_id: _Optional[str] = ..., capped_episodes: _Optional[_Union[CappedEpisodes, str]] = ..., teacher_scored: bool = ..., from_store: bool = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class GetTrajectoryRequest(_message.Message):
    __slots__ = ("session_id", "trajectory_name", "view")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    trajectory_name: str
    view: TrajectoryView
    def __init__(self, session_id: _Optional[str] = ..., trajectory_name: _Optional[str] = ..., view: _Optional[_Union[TrajectoryView, str]] = ...) -> None: ...

class GetTrajectoryResponse(_message.Message):
    __slots__ = ("trajectory",)
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    trajectory: _trajectory_pb2.Trajectory
    def __init__(self, trajectory: _Optional[_Union[_trajectory_pb2.Trajectory, _Mapping]] = ...) -> None: ...

class ListTrajectoriesRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "session_id", "group_id", "state", "view")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    session_id: str
    group_id: str
    state: _trajectory_pb2.TrajectoryState
    view: TrajectoryView
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., session_id: _Optional[str] = ..., group_id: _Optional[str] = ..., state: _Optional[_Union[_trajectory_pb2.TrajectoryState, str]] = ..., view: _Optional[_Union[TrajectoryView, str]] = ...) -> None: ...

class ListTrajectoriesResponse(_message.Message):
    __slots__ = ("trajectories", "next_page_token")
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    trajectories: _containers.RepeatedCompositeFieldContainer[_trajectory_pb2.Trajectory]
    next_page_token: str
    def __init__(self, trajectories: _Optional[_Iterable[_Union[_trajectory_pb2.Trajectory, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StreamBatchesRequest(_message.Message):
    __slots__ = ("subscribe", "ack")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    subscribe: BatchSubscription
    ack: BatchAck
    def __init__(self, subscribe: _Optional[_Union[BatchSubscription, _Mapping]] = ..., ack: _Optional[_Union[BatchAck, _Mapping]] = ...) -> None: ...

class BatchSubscription(_message.Message):
    __slots__ = ("consumer_id", "groups_per_batch", "max_unacked_batches", "policy_version", "max_policy_lag", "run_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUPS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_UNACKED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_POLICY_LAG_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: str
    groups_per_batch: int
    max_unacked_batches: int
    policy_version: int
    max_policy_lag: int
    run_id: str
    def __init__(self, consumer_id: _Optional[str] = ..., groups_per_batch: _Optional[int] = ..., max_unacked_batches: _Optional[int] = ..., policy_version: _Optional[int] = ..., max_policy_lag: _Optional[int] = ..., run_id: _Optional[str] = ...) -> None: ...

class BatchAck(_message.Message):
    __slots__ = ("batch_id", "policy_version")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    policy_version: int
    def __init__(self, batch_id: _Optional[str] = ..., policy_version: _Optional[int] = ...) -> None: ...

class StreamBatchesResponse(_message.Message):
    __slots__ = ("batch",)
    BATCH_FIELD_NUMBER: _ClassVar[int]
    batch: _batch_pb2.Batch
    def __init__(self, batch: _Optional[_Union[_batch_pb2.Batch, _Mapping]] = ...) -> None: ...

class ReleaseBatchRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ReleaseBatchResponse(_message.Message):
    __slots__ = ("pending_group_count",)
    PENDING_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    pending_group_count: int
    def __init__(self, pending_group_count: _Optional[int] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("closed_session_count", "pending_group_count", "delivered_batch_count", "acknowledged_batch_count", "delivered_sample_count", "filtered_counts", "error_counts", "validation_session_count")
    class FilteredCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ErrorCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CLOSED_SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    FILTERED_COUNTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_COUNTS_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    closed_session_count: int
    pending_group_count: int
    delivered_batch_count: int
    acknowledged_batch_count: int
    delivered_sample_count: int
    filtered_counts: _containers.ScalarMap[str, int]
    error_counts: _containers.ScalarMap[str, int]
    validation_session_count: int
    def __init__(self, closed_session_count: _Optional[int] = ..., pending_group_count: _Optional[int] = ..., delivered_batch_count: _Optional[int] = ..., acknowledged_batch_count: _Optional[int] = ..., delivered_sample_count: _Optional[int] = ..., filtered_counts: _Optional[_Mapping[str, int]] = ..., error_counts: _Optional[_Mapping[str, int]] = ..., validation_session_count: _Optional[int] = ...) -> None: ...
