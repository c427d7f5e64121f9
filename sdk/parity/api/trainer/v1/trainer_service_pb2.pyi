from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from parity.api.assembler.v1 import batch_pb2 as _batch_pb2
from parity.api.auth.v1 import auth_pb2 as _auth_pb2
from parity.api.trainer.v1 import promotion_pb2 as _promotion_pb2
from parity.api.trainer.v1 import run_pb2 as _run_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetricsKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METRICS_KIND_UNSPECIFIED: _ClassVar[MetricsKind]
    METRICS_KIND_TRAINING: _ClassVar[MetricsKind]
    METRICS_KIND_VALIDATION: _ClassVar[MetricsKind]
METRICS_KIND_UNSPECIFIED: MetricsKind
METRICS_KIND_TRAINING: MetricsKind
METRICS_KIND_VALIDATION: MetricsKind

class GetStatusRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("run", "last_sync")
    RUN_FIELD_NUMBER: _ClassVar[int]
    LAST_SYNC_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    last_sync: SyncWeightsResponse
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ..., last_sync: _Optional[_Union[SyncWeightsResponse, _Mapping]] = ...) -> None: ...

class StreamMetricsRequest(_message.Message):
    __slots__ = ("from_step", "run_id")
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    from_step: int
    run_id: str
    def __init__(self, from_step: _Optional[int] = ..., run_id: _Optional[str] = ...) -> None: ...

class StreamMetricsResponse(_message.Message):
    __slots__ = ("metrics",)
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: StepMetrics
    def __init__(self, metrics: _Optional[_Union[StepMetrics, _Mapping]] = ...) -> None: ...

class StepMetrics(_message.Message):
    __slots__ = ("run_id", "step", "time", "values", "kind")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    time: _timestamp_pb2.Timestamp
    values: _containers.ScalarMap[str, float]
    kind: MetricsKind
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., values: _Optional[_Mapping[str, float]] = ..., kind: _Optional[_Union[MetricsKind, str]] = ...) -> None: ...

class SyncWeightsRequest(_message.Message):
    __slots__ = ("skip_verification", "run_id")
    SKIP_VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    skip_verification: bool
    run_id: str
    def __init__(self, skip_verification: bool = ..., run_id: _Optional[str] = ...) -> None: ...

class SyncWeightsResponse(_message.Message):
    __slots__ = ("policy_version", "replicas", "max_logprob_diff", "durations", "complete_time")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_LOGPROB_DIFF_FIELD_NUMBER: _ClassVar[int]
    DURATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaSync]
    max_logprob_diff: float
    durations: SyncPhaseDurations
    complete_time: _timestamp_pb2.Timestamp
    def __init__(self, policy_version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaSync, _Mapping]]] = ..., max_logprob_diff: _Optional[float] = ..., durations: _Optional[_Union[SyncPhaseDurations, _Mapping]] = ..., complete_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReplicaSync(_message.Message):
    __slots__ = ("replica", "verified", "max_logprob_diff", "error_message")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    MAX_LOGPROB_DIFF_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    replica: str
    verified: bool
    max_logprob_diff: float
    error_message: str
    def __init__(self, replica: _Optional[str] = ..., verified: bool = ..., max_logprob_diff: _Optional[float] = ..., error_message: _Optional[str] = ...) -> None: ...

class SyncPhaseDurations(_message.Message):
    __slots__ = ("pause", "push", "verify", "resume", "total")
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    pause: _duration_pb2.Duration
    push: _duration_pb2.Duration
    verify: _duration_pb2.Duration
    resume: _duration_pb2.Duration
    total: _duration_pb2.Duration
    def __init__(self, pause: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., push: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., verify: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., resume: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., total: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("config", "resume_checkpoint_id", "run_id")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RESUME_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    config: _run_pb2.RunConfig
    resume_checkpoint_id: str
    run_id: str
    def __init__(self, config: _Optional[_Union[_run_pb2.RunConfig, _Mapping]] = ..., resume_checkpoint_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class PauseRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class PauseRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class StopRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class StopRunResponse(_message.Message):
    __slots__ = ("run", "checkpoint")
    RUN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    checkpoint: _run_pb2.Checkpoint
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ..., checkpoint: _Optional[_Union[_run_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class SaveCheckpointRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class SaveCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _run_pb2.Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[_run_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "run_id")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    run_id: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints", "next_page_token")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_run_pb2.Checkpoint]
    next_page_token: str
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_run_pb2.Checkpoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ExportPolicyRequest(_message.Message):
    __slots__ = ("checkpoint_id", "output_dir", "merge_lora")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIR_FIELD_NUMBER: _ClassVar[int]
    MERGE_LORA_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    output_dir: str
    merge_lora: bool
    def __init__(self, checkpoint_id: _Optional[str] = ..., output_dir: _Optional[str] = ..., merge_lora: bool = ...) -> None: ...

class ExportPolicyResponse(_message.Message):
    __slots__ = ("path", "checkpoint", "merged_path")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MERGED_PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    checkpoint: _run_pb2.Checkpoint
    merged_path: str
    def __init__(self, path: _Optional[str] = ..., checkpoint: _Optional[_Union[_run_pb2.Checkpoint, _Mapping]] = ..., merged_path: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_run_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_run_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ListRunMetricsRequest(_message.Message):
    __slots__ = ("run_id", "kind", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    kind: MetricsKind
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., kind: _Optional[_Union[MetricsKind, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunMetricsResponse(_message.Message):
    __slots__ = ("metrics", "next_page_token")
    METRICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    metrics: _containers.RepeatedCompositeFieldContainer[StepMetrics]
    next_page_token: str
    def __init__(self, metrics: _Optional[_Iterable[_Union[StepMetrics, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetStepBatchRequest(_message.Message):
    __slots__ = ("run_id", "step")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class GetStepBatchResponse(_message.Message):
    __slots__ = ("batch",)
    BATCH_FIELD_NUMBER: _ClassVar[int]
    batch: StepBatch
    def __init__(self, batch: _Optional[_Union[StepBatch, _Mapping]] = ...) -> None: ...

class ListTrainedSessionsRequest(_message.Message):
    __slots__ = ("end_user_id", "session_ids", "page_size", "page_token")
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    end_user_id: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    def __init__(self, end_user_id: _Optional[str] = ..., session_ids: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTrainedSessionsResponse(_message.Message):
    __slots__ = ("steps", "next_page_token")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[TrainedSessionsStep]
    next_page_token: str
    def __init__(self, steps: _Optional[_Iterable[_Union[TrainedSessionsStep, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TrainedSessionsStep(_message.Message):
    __slots__ = ("run_id", "step", "session_ids", "train_time")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_TIME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    train_time: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., session_ids: _Optional[_Iterable[str]] = ..., train_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StepBatch(_message.Message):
    __slots__ = ("run_id", "step", "batch_id", "group_ids", "stats", "samples", "dropped_group_ids", "advantage_estimator")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    batch_id: str
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    stats: _batch_pb2.BatchStats
    samples: _containers.RepeatedCompositeFieldContainer[TrainedSample]
    dropped_group_ids: _containers.RepeatedScalarFieldContainer[str]
    advantage_estimator: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., batch_id: _Optional[str] = ..., group_ids: _Optional[_Iterable[str]] = ..., stats: _Optional[_Union[_batch_pb2.BatchStats, _Mapping]] = ..., samples: _Optional[_Iterable[_Union[TrainedSample, _Mapping]]] = ..., dropped_group_ids: _Optional[_Iterable[str]] = ..., advantage_estimator: _Optional[str] = ...) -> None: ...

class TrainedSample(_message.Message):
    __slots__ = ("sample_id", "session_id", "trajectory_name", "episode_id", "group_id", "reward", "total_return", "advantage", "token_count", "loss_token_count", "policy_version", "truncated", "call_ids", "teacher_logprobs", "student_logprobs", "teacher_gap", "end_user_id")
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RETURN_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOSS_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TEACHER_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STUDENT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TEACHER_GAP_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    session_id: str
    trajectory_name: str
    episode_id: str
    group_id: str
    reward: float
    total_return: float
    advantage: float
    token_count: int
    loss_token_count: int
    policy_version: int
    truncated: bool
    call_ids: _containers.RepeatedScalarFieldContainer[str]
    teacher_logprobs: bytes
    student_logprobs: bytes
    teacher_gap: float
    end_user_id: str
    def __init__(self, sample_id: _Optional[str] = ..., session_id: _Optional[str] = ..., trajectory_name: _Optional[str] = ..., episode_id: _Optional[str] = ..., group_id: _Optional[str] = ..., reward: _Optional[float] = ..., total_return: _Optional[float] = ..., advantage: _Optional[float] = ..., token_count: _Optional[int] = ..., loss_token_count: _Optional[int] = ..., policy_version: _Optional[int] = ..., truncated: bool = ..., call_ids: _Optional[_Iterable[str]] = ..., teacher_logprobs: _Optional[bytes] = ..., student_logprobs: _Optional[bytes] = ..., teacher_gap: _Optional[float] = ..., end_user_id: _Optional[str] = ...) -> None: ...

class WriteValidationMetricsRequest(_message.Message):
    __slots__ = ("run_id", "step", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    values: _containers.ScalarMap[str, float]
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class WriteValidationMetricsResponse(_message.Message):
    __slots__ = ("metrics",)
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: StepMetrics
    def __init__(self, metrics: _Optional[_Union[StepMetrics, _Mapping]] = ...) -> None: ...

class PromotePolicyRequest(_message.Message):
    __slots__ = ("run_id", "checkpoint_id", "metric", "margin", "canary_share", "served_model")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    CANARY_SHARE_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    checkpoint_id: str
    metric: str
    margin: float
    canary_share: float
    served_model: str
    def __init__(self, run_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., metric: _Optional[str] = ..., margin: _Optional[float] = ..., canary_share: _Optional[float] = ..., served_model: _Optional[str] = ...) -> None: ...

class PromotePolicyResponse(_message.Message):
    __slots__ = ("promotion",)
    PROMOTION_FIELD_NUMBER: _ClassVar[int]
    promotion: _promotion_pb2.Promotion
    def __init__(self, promotion: _Optional[_Union[_promotion_pb2.Promotion, _Mapping]] = ...) -> None: ...

class RollbackPolicyRequest(_message.Message):
    __slots__ = ("served_model",)
    SERVED_MODEL_FIELD_NUMBER: _ClassVar[int]
    served_model: str
    def __init__(self, served_model: _Optional[str] = ...) -> None: ...

class RollbackPolicyResponse(_message.Message):
    __slots__ = ("promotion",)
    PROMOTION_FIELD_NUMBER: _ClassVar[int]
    promotion: _promotion_pb2.Promotion
    def __init__(self, promotion: _Optional[_Union[_promotion_pb2.Promotion, _Mapping]] = ...) -> None: ...

class ListPromotionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPromotionsResponse(_message.Message):
    __slots__ = ("promotions", "next_page_token")
    PROMOTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    promotions: _containers.RepeatedCompositeFieldContainer[_promotion_pb2.Promotion]
    next_page_token: str
    def __init__(self, promotions: _Optional[_Iterable[_Union[_promotion_pb2.Promotion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
