from parity.api.common.v1 import sample_pb2 as _sample_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Batch(_message.Message):
    __slots__ = ("batch_id", "sequence", "samples", "group_ids", "stats", "redelivered", "dropped_group_ids")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    REDELIVERED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    sequence: int
    samples: _containers.RepeatedCompositeFieldContainer[_sample_pb2.Sample]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    stats: BatchStats
    redelivered: bool
    dropped_group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, batch_id: _Optional[str] = ..., sequence: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[_sample_pb2.Sample, _Mapping]]] = ..., group_ids: _Optional[_Iterable[str]] = ..., stats: _Optional[_Union[BatchStats, _Mapping]] = ..., redelivered: bool = ..., dropped_group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchStats(_message.Message):
    __slots__ = ("sample_count", "group_count", "merged_call_count", "split_count", "token_count", "loss_token_fraction", "truncated_count", "filtered_counts", "reward_mean", "reward_std", "unique_token_count", "split_reasons", "capped_episode_count", "thread_count", "threads_per_session", "max_thread_repetition", "threads_ended_at_limit")
    class FilteredCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SplitReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    MERGED_CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOSS_TOKEN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    FILTERED_COUNTS_FIELD_NUMBER: _ClassVar[int]
    REWARD_MEAN_FIELD_NUMBER: _ClassVar[int]
    REWARD_STD_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_REASONS_FIELD_NUMBER: _ClassVar[int]
    CAPPED_EPISODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    THREAD_COUNT_FIELD_NUMBER: _ClassVar[int]
    THREADS_PER_SESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_THREAD_REPETITION_FIELD_NUMBER: _ClassVar[int]
    THREADS_ENDED_AT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    sample_count: int
    group_count: int
    merged_call_count: int
    split_count: int
    token_count: int
    loss_token_fraction: float
    truncated_count: int
    filtered_counts: _containers.ScalarMap[str, int]
    reward_mean: float
    reward_std: float
    unique_token_count: int
    split_reasons: _containers.ScalarMap[str, int]
    capped_episode_count: int
    thread_count: int
    threads_per_session: float
    max_thread_repetition: float
    threads_ended_at_limit: int
    def __init__(self, sample_count: _Optional[int] = ..., group_count: _Optional[int] = ..., merged_call_count: _Optional[int] = ..., split_count: _Optional[int] = ..., token_count: _Optional[int] = ..., loss_token_fraction: _Optional[float] = ..., truncated_count: _Optional[int] = ..., filtered_counts: _Optional[_Mapping[str, int]] = ..., reward_mean: _Optional[float] = ..., reward_std: _Optional[float] = ..., unique_token_count: _Optional[int] = ..., split_reasons: _Optional[_Mapping[str, int]] = ..., capped_episode_count: _Optional[int] = ..., thread_count: _Optional[int] = ..., threads_per_session: _Optional[float] = ..., max_thread_repetition: _Optional[float] = ..., threads_ended_at_limit: _Optional[int] = ...) -> None: ...
