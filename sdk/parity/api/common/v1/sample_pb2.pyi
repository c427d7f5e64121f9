from parity.api.common.v1 import llm_call_pb2 as _llm_call_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sample(_message.Message):
    __slots__ = ("sample_id", "session_id", "trajectory_name", "episode_id", "group_id", "token_ids", "loss_mask", "rollout_logprobs", "reward", "token_rewards", "policy_version", "prompt_length", "call_ids", "truncated", "metadata", "history_mode", "end_user_id", "thread_index", "thread_id", "advantage_group")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_NAME_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TOKEN_REWARDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MODE_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_INDEX_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    session_id: str
    trajectory_name: str
    episode_id: str
    group_id: str
    token_ids: bytes
    loss_mask: bytes
    rollout_logprobs: bytes
    reward: float
    token_rewards: bytes
    policy_version: int
    prompt_length: int
    call_ids: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    metadata: _containers.ScalarMap[str, str]
    history_mode: _llm_call_pb2.HistoryMode
    end_user_id: str
    thread_index: int
    thread_id: str
    advantage_group: str
    def __init__(self, sample_id: _Optional[str] = ..., session_id: _Optional[str] = ..., trajectory_name: _Optional[str] = ..., episode_id: _Optional[str] = ..., group_id: _Optional[str] = ..., token_ids: _Optional[bytes] = ..., loss_mask: _Optional[bytes] = ..., rollout_logprobs: _Optional[bytes] = ..., reward: _Optional[float] = ..., token_rewards: _Optional[bytes] = ..., policy_version: _Optional[int] = ..., prompt_length: _Optional[int] = ..., call_ids: _Optional[_Iterable[str]] = ..., truncated: bool = ..., metadata: _Optional[_Mapping[str, str]] = ..., history_mode: _Optional[_Union[_llm_call_pb2.HistoryMode, str]] = ..., end_user_id: _Optional[str] = ..., thread_index: _Optional[int] = ..., thread_id: _Optional[str] = ..., advantage_group: _Optional[str] = ...) -> None: ...
