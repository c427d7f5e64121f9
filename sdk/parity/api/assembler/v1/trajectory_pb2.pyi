from parity.api.common.v1 import llm_call_pb2 as _llm_call_pb2
from parity.api.common.v1 import reward_pb2 as _reward_pb2
from parity.api.common.v1 import sample_pb2 as _sample_pb2
from parity.api.common.v1 import session_pb2 as _session_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrajectoryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAJECTORY_STATE_UNSPECIFIED: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_OPEN: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_PENDING: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_READY: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_TRAINED: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_FILTERED: _ClassVar[TrajectoryState]
    TRAJECTORY_STATE_VALIDATION: _ClassVar[TrajectoryState]
TRAJECTORY_STATE_UNSPECIFIED: TrajectoryState
TRAJECTORY_STATE_OPEN: TrajectoryState
TRAJECTORY_STATE_PENDING: TrajectoryState
TRAJECTORY_STATE_READY: TrajectoryState
TRAJECTORY_STATE_TRAINED: TrajectoryState
TRAJECTORY_STATE_FILTERED: TrajectoryState
TRAJECTORY_STATE_VALIDATION: TrajectoryState

class Step(_message.Message):
    __slots__ = ("call_id", "step_index", "prompt_token_count", "completion_token_count", "reward", "has_reward", "thread_index", "thread_id")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    HAS_REWARD_FIELD_NUMBER: _ClassVar[int]
    THREAD_INDEX_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    step_index: int
    prompt_token_count: int
    completion_token_count: int
    reward: float
    has_reward: bool
    thread_index: int
    thread_id: str
    def __init__(self, call_id: _Optional[str] = ..., step_index: _Optional[int] = ..., prompt_token_count: _Optional[int] = ..., completion_token_count: _Optional[int] = ..., reward: _Optional[float] = ..., has_reward: bool = ..., thread_index: _Optional[int] = ..., thread_id: _Optional[str] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("session_id", "trajectory_name", "episode_id", "group_id", "state", "steps", "reward", "has_reward", "rewards", "samples", "filter_reason", "split_count", "outcome", "split_reasons", "token_count", "unique_token_count", "merged_call_count", "history_mode", "thread_count")
    class SplitReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    HAS_REWARD_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    FILTER_REASON_FIELD_NUMBER: _ClassVar[int]
    SPLIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SPLIT_REASONS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    MERGED_CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MODE_FIELD_NUMBER: _ClassVar[int]
    THREAD_COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    trajectory_name: str
    episode_id: str
    group_id: str
    state: TrajectoryState
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    reward: float
    has_reward: bool
    rewards: _containers.RepeatedCompositeFieldContainer[_reward_pb2.Reward]
    samples: _containers.RepeatedCompositeFieldContainer[_sample_pb2.Sample]
    filter_reason: str
    split_count: int
    outcome: _session_pb2.SessionOutcome
    split_reasons: _containers.ScalarMap[str, int]
    token_count: int
    unique_token_count: int
    merged_call_count: int
    history_mode: _llm_call_pb2.HistoryMode
    thread_count: int
    def __init__(self, session_id: _Optional[str] = ..., trajectory_name: _Optional[str] = ..., episode_id: _Optional[str] = ..., group_id: _Optional[str] = ..., state: _Optional[_Union[TrajectoryState, str]] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., reward: _Optional[float] = ..., has_reward: bool = ..., rewards: _Optional[_Iterable[_Union[_reward_pb2.Reward, _Mapping]]] = ..., samples: _Optional[_Iterable[_Union[_sample_pb2.Sample, _Mapping]]] = ..., filter_reason: _Optional[str] = ..., split_count: _Optional[int] = ..., outcome: _Optional[_Union[_session_pb2.SessionOutcome, str]] = ..., split_reasons: _Optional[_Mapping[str, int]] = ..., token_count: _Optional[int] = ..., unique_token_count: _Optional[int] = ..., merged_call_count: _Optional[int] = ..., history_mode: _Optional[_Union[_llm_call_pb2.HistoryMode, str]] = ..., thread_count: _Optional[int] = ...) -> None: ...
