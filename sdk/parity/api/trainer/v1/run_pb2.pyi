from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_WAITING_FOR_DATA: _ClassVar[RunState]
    RUN_STATE_TRAINING: _ClassVar[RunState]
    RUN_STATE_SYNCING: _ClassVar[RunState]
    RUN_STATE_PAUSED: _ClassVar[RunState]
    RUN_STATE_COMPLETED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_STOPPED: _ClassVar[RunState]
    RUN_STATE_STARTING: _ClassVar[RunState]

class AdvantageEstimator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADVANTAGE_ESTIMATOR_UNSPECIFIED: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_GRPO: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_RLOO: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: _ClassVar[AdvantageEstimator]

class RolloutMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_MODE_UNSPECIFIED: _ClassVar[RolloutMode]
    ROLLOUT_MODE_SYNC: _ClassVar[RolloutMode]
    ROLLOUT_MODE_ASYNC: _ClassVar[RolloutMode]

class TrainingBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAINING_BACKEND_UNSPECIFIED: _ClassVar[TrainingBackend]
    TRAINING_BACKEND_FSDP: _ClassVar[TrainingBackend]
    TRAINING_BACKEND_CPU: _ClassVar[TrainingBackend]

class LossAggMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_AGG_MODE_UNSPECIFIED: _ClassVar[LossAggMode]
    LOSS_AGG_MODE_TOKEN_MEAN: _ClassVar[LossAggMode]
    LOSS_AGG_MODE_SEQ_MEAN_TOKEN_SUM: _ClassVar[LossAggMode]
    LOSS_AGG_MODE_SEQ_MEAN_TOKEN_MEAN: _ClassVar[LossAggMode]

class TrainingDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAINING_DTYPE_UNSPECIFIED: _ClassVar[TrainingDtype]
    TRAINING_DTYPE_FLOAT32: _ClassVar[TrainingDtype]
    TRAINING_DTYPE_BFLOAT16: _ClassVar[TrainingDtype]
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_WAITING_FOR_DATA: RunState
RUN_STATE_TRAINING: RunState
RUN_STATE_SYNCING: RunState
RUN_STATE_PAUSED: RunState
RUN_STATE_COMPLETED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_STOPPED: RunState
RUN_STATE_STARTING: RunState
ADVANTAGE_ESTIMATOR_UNSPECIFIED: AdvantageEstimator
ADVANTAGE_ESTIMATOR_GRPO: AdvantageEstimator
ADVANTAGE_ESTIMATOR_RLOO: AdvantageEstimator
ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: AdvantageEstimator
ROLLOUT_MODE_UNSPECIFIED: RolloutMode
ROLLOUT_MODE_SYNC: RolloutMode
ROLLOUT_MODE_ASYNC: RolloutMode
TRAINING_BACKEND_UNSPECIFIED: TrainingBackend
TRAINING_BACKEND_FSDP: TrainingBackend
TRAINING_BACKEND_CPU: TrainingBackend
LOSS_AGG_MODE_UNSPECIFIED: LossAggMode
LOSS_AGG_MODE_TOKEN_MEAN: LossAggMode
LOSS_AGG_MODE_SEQ_MEAN_TOKEN_SUM: LossAggMode
LOSS_AGG_MODE_SEQ_MEAN_TOKEN_MEAN: LossAggMode
TRAINING_DTYPE_UNSPECIFIED: TrainingDtype
TRAINING_DTYPE_FLOAT32: TrainingDtype
TRAINING_DTYPE_BFLOAT16: TrainingDtype

class RunConfig(_message.Message):
    __slots__ = ("model_path", "advantage_estimator", "rollout_mode", "backend", "total_steps", "groups_per_batch", "learning_rate", "clip_ratio", "kl_coef", "tis_cap", "max_policy_lag", "checkpoint_dir", "checkpoint_interval", "lora", "ppo_epochs", "max_grad_norm", "loss_agg_mode", "seed", "micro_batch_tokens", "ray_workers_per_node", "ray_nodes", "dtype", "share_prefixes", "teacher", "teacher_coef", "reward_coef")
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_MODE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    CLIP_RATIO_FIELD_NUMBER: _ClassVar[int]
    KL_COEF_FIELD_NUMBER: _ClassVar[int]
    TIS_CAP_FIELD_NUMBER: _ClassVar[int]
    MAX_POLICY_LAG_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    LORA_FIELD_NUMBER: _ClassVar[int]
    PPO_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MAX_GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    LOSS_AGG_MODE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RAY_WORKERS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    RAY_NODES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHARE_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    TEACHER_FIELD_NUMBER: _ClassVar[int]
    TEACHER_COEF_FIELD_NUMBER: _ClassVar[int]
    REWARD_COEF_FIELD_NUMBER: _ClassVar[int]
    model_path: str
    advantage_estimator: AdvantageEstimator
    rollout_mode: RolloutMode
    backend: TrainingBackend
    total_steps: int
    groups_per_batch: int
    learning_rate: float
    clip_ratio: float
    kl_coef: float
    tis_cap: float
    max_policy_lag: int
    checkpoint_dir: str
    checkpoint_interval: int
    lora: LoraConfig
    ppo_epochs: int
    max_grad_norm: float
    loss_agg_mode: LossAggMode
    seed: int
    micro_batch_tokens: int
    ray_workers_per_node: int
    ray_nodes: int
    dtype: TrainingDtype
    share_prefixes: bool
    teacher: TeacherConfig
    teacher_coef: float
    reward_coef: float
    def __init__(self, model_path: _Optional[str] = ..., advantage_estimator: _Optional[_Union[AdvantageEstimator, str]] = ..., rollout_mode: _Optional[_Union[RolloutMode, str]] = ..., backend: _Optional[_Union[TrainingBackend, str]] = ..., total_steps: _Optional[int] = ..., groups_per_batch: _Optional[int] = ..., learning_rate: _Optional[float] = ..., clip_ratio: _Optional[float] = ..., kl_coef: _Optional[float] = ..., tis_cap: _Optional[float] = ..., max_policy_lag: _Optional[int] = ..., checkpoint_dir: _Optional[str] = ..., checkpoint_interval: _Optional[int] = ..., lora: _Optional[_Union[LoraConfig, _Mapping]] = ..., ppo_epochs: _Optional[int] = ..., max_grad_norm: _Optional[float] = ..., loss_agg_mode: _Optional[_Union[LossAggMode, str]] = ..., seed: _Optional[int] = ..., micro_batch_tokens: _Optional[int] = ..., ray_workers_per_node: _Optional[int] = ..., ray_nodes: _Optional[int] = ..., dtype: _Optional[_Union[TrainingDtype, str]] = ..., share_prefixes: bool = ..., teacher: _Optional[_Union[TeacherConfig, _Mapping]] = ..., teacher_coef: _Optional[float] = ..., reward_coef: _Optional[float] = ...) -> None: ...

class TeacherConfig(_message.Message):
    __slots__ = ("url", "model", "replica_urls")
    URL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_URLS_FIELD_NUMBER: _ClassVar[int]
    url: str
    model: str
    replica_urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, url: _Optional[str] = ..., model: _Optional[str] = ..., replica_urls: _Optional[_Iterable[str]] = ...) -> None: ...

class LoraConfig(_message.Message):
    __slots__ = ("rank", "alpha", "target_modules", "dropout")
    RANK_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODULES_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    alpha: int
    target_modules: _containers.RepeatedScalarFieldContainer[str]
    dropout: float
    def __init__(self, rank: _Optional[int] = ..., alpha: _Optional[int] = ..., target_modules: _Optional[_Iterable[str]] = ..., dropout: _Optional[float] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("checkpoint_id", "run_id", "step", "policy_version", "path", "create_time")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    run_id: str
    step: int
    policy_version: int
    path: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, checkpoint_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step: _Optional[int] = ..., policy_version: _Optional[int] = ..., path: _Optional[str] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "config", "state", "step", "policy_version", "error_message", "start_time", "update_time", "plot_path", "served_model")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PLOT_PATH_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    config: RunConfig
    state: RunState
    step: int
    policy_version: int
    error_message: str
    start_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    plot_path: str
    served_model: str
    def __init__(self, run_id: _Optional[str] = ..., config: _Optional[_Union[RunConfig, _Mapping]] = ..., state: _Optional[_Union[RunState, str]] = ..., step: _Optional[int] = ..., policy_version: _Optional[int] = ..., error_message: _Optional[str] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., plot_path: _Optional[str] = ..., served_model: _Optional[str] = ...) -> None: ...
