from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PromotionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROMOTION_OUTCOME_UNSPECIFIED: _ClassVar[PromotionOutcome]
    PROMOTION_OUTCOME_PROMOTED: _ClassVar[PromotionOutcome]
    PROMOTION_OUTCOME_REFUSED: _ClassVar[PromotionOutcome]
    PROMOTION_OUTCOME_ROLLED_BACK: _ClassVar[PromotionOutcome]
    PROMOTION_OUTCOME_CANARY: _ClassVar[PromotionOutcome]
PROMOTION_OUTCOME_UNSPECIFIED: PromotionOutcome
PROMOTION_OUTCOME_PROMOTED: PromotionOutcome
PROMOTION_OUTCOME_REFUSED: PromotionOutcome
PROMOTION_OUTCOME_ROLLED_BACK: PromotionOutcome
PROMOTION_OUTCOME_CANARY: PromotionOutcome

class Promotion(_message.Message):
    __slots__ = ("promotion_id", "outcome", "run_id", "checkpoint_id", "policy_version", "metric", "baseline", "candidate", "margin", "reason", "max_logprob_diff", "create_time", "path", "canary_share", "served_model")
    PROMOTION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MAX_LOGPROB_DIFF_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CANARY_SHARE_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_FIELD_NUMBER: _ClassVar[int]
    promotion_id: str
    outcome: PromotionOutcome
    run_id: str
    checkpoint_id: str
    policy_version: int
    metric: str
    baseline: float
    candidate: float
    margin: float
    reason: str
    max_logprob_diff: float
    create_time: _timestamp_pb2.Timestamp
    path: str
    canary_share: float
    served_model: str
    def __init__(self, promotion_id: _Optional[str] = ..., outcome: _Optional[_Union[PromotionOutcome, str]] = ..., run_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., policy_version: _Optional[int] = ..., metric: _Optional[str] = ..., baseline: _Optional[float] = ..., candidate: _Optional[float] = ..., margin: _Optional[float] = ..., reason: _Optional[str] = ..., max_logprob_diff: _Optional[float] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., path: _Optional[str] = ..., canary_share: _Optional[float] = ..., served_model: _Optional[str] = ...) -> None: ...
