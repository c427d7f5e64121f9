"""The settings of a run's update, defined once for both sides of the trainer's gRPC API.

`parity train` and `parity.train()` (TrainSettings) and the trainer service (RunSettings)
both extend `UpdateSettings`: one name, type, default, help text and range check per
setting. On the wire each is the `RunConfig` field of the same name; `to_run_config` and
`from_run_config` convert every field by that rule, so a setting added here travels
without more code. Proto fields with presence (`optional`) are the ones whose default is
not zero: unset takes the default, and a zero that makes no sense is refused, not read
as unset.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import EnumDescriptor

if TYPE_CHECKING:
    # The upb runtime (protobuf's default) hands out descriptors of its own class.
    from google._upb._message import EnumDescriptor as UpbEnumDescriptor

from parity.api.trainer.v1 import run_pb2
from parity.core.settings_fields import SettingsError, setting

ADVANTAGE_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus")
BACKENDS = ("auto", "cpu", "fsdp")
ROLLOUT_MODES = ("sync", "async")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
DTYPES = ("auto", "float32", "bfloat16")
# peft's name for every linear layer but the output head, the default LoRA target.
ALL_LINEAR = "all-linear"
# The LoRA settings travel as the RunConfig.lora message.
LORA_FIELDS = {
    "lora_rank": "rank",
    "lora_alpha": "alpha",
    "lora_target_modules": "target_modules",
    "lora_dropout": "dropout",
}
# The teacher settings travel as the RunConfig.teacher message.
TEACHER_FIELDS = {"teacher": "url", "teacher_model": "model"}

_CONFIG = run_pb2.RunConfig.DESCRIPTOR


@dataclass(frozen=True, kw_only=True)
class UpdateSettings:
    groups_per_batch: int = setting(4, "tasks per training batch", group="schedule")
    learning_rate: float | None = setting(
        None,
        "AdamW learning rate; default: the named model's (`parity model list`; smollm2-135m-instruct's is 1e-5, 4e-5 on reasoning-gym tasks), else by the model's size: 1e-5 up to 300M parameters, 1e-6 up to 3B, 5e-7 above",
        group="optimization",
    )
    advantage_estimator: str = setting(
        "grpo", "verl's advantage estimator", ADVANTAGE_ESTIMATORS, group="optimization"
    )
    backend: str = setting(
        "auto",
        "cpu (a plain torch loop), fsdp (verl's FSDP engine), or auto (fsdp on a GPU)",
        BACKENDS,
        group="optimization",
    )
    rollout_mode: str = setting(
        "sync",
        "sync: rollouts wait for each update; async: they run on, at most max_policy_lag versions behind",
        ROLLOUT_MODES,
        group="optimization",
    )
    max_policy_lag: int = setting(
        1,
        "async mode: policy versions a sample may lag the trainer; 0: strictly on-policy",
        group="optimization",
    )
    kl_coef: float = setting(
        0.0,
        "low-variance KL penalty against the starting policy; 0 turns it off",
        group="optimization",
    )
    clip_ratio: float = setting(0.2, "PPO clip range", group="optimization")
    tis_cap: float = setting(
        2.0,
        "cap on the trainer/rollout importance ratio of each token (truncated importance sampling)",
        group="optimization",
    )
    ppo_epochs: int = setting(
        1, "passes over each batch; more than 1 makes the PPO clip bite", group="optimization"
    )
    max_grad_norm: float = setting(1.0, "gradient clipping norm", group="optimization")
    loss_agg_mode: str = setting(
        "token-mean",
        "how the per-token loss is averaged (verl's agg_loss)",
        LOSS_AGG_MODES,
        group="optimization",
    )
    seed: int = setting(0, "seeds the trainer and the order of the tasks", group="optimization")
    dtype: str = setting(
        "auto",
        "the dtype forward and backward run in (weights and optimizer stay float32); auto: the dtype the trainer's vLLM replicas serve (another named dtype is refused before the first step); where none answers, bfloat16 on CUDA and on a CPU with bfloat16 units (AMX, AVX-512-BF16), float32 elsewhere; the local stack's vLLM serves in what auto resolves to here",
        DTYPES,
        group="optimization",
    )
    micro_batch_tokens: int = setting(
        16384,
        "fsdp backend: tokens per micro-batch on each GPU (bounds activation memory)",
        group="optimization",
    )
    ray_workers_per_node: int = setting(
        0,
        "fsdp backend: training ranks per node as Ray actors (one per GPU); 0 trains in the trainer process",
        group="optimization",
    )
    ray_nodes: int = setting(
        1,
        "with ray_workers_per_node: nodes of the Ray cluster at $RAY_ADDRESS to spread the ranks over, ray_workers_per_node on each, rank 0 on the trainer's node",
        group="optimization",
    )
    share_prefixes: bool = setting(
        True,
        "compute a prefix shared by a step's samples once, in either backend; on only where exact (the loss and gradients are the unshared computation's)",
        group="optimization",
    )
    checkpoint_interval: int = setting(
        10,
        "save a checkpoint every N steps (and always at the end); 0: only at the end",
        group="optimization",
    )
    lora_rank: int = setting(
        0,
        "train a LoRA adapter of this rank on the frozen model instead of the whole model; 0: the whole model",
        group="lora",
    )
    lora_alpha: int = setting(
        0,
        "LoRA scale numerator: updates are scaled by lora_alpha / lora_rank; 0: twice the rank",
        group="lora",
    )
    lora_target_modules: str = setting(
        ALL_LINEAR,
        "comma-separated names of the modules LoRA adapts (q_proj,v_proj), as peft matches them; all-linear: every linear layer but the output head",
        group="lora",
    )
    lora_dropout: float = setting(
        0.0,
        "dropout on the adapter's input while training (the cpu backend; fsdp takes 0)",
        group="lora",
    )
    teacher: str = setting(
        "",
        "on-policy distillation from this teacher, which scores every token the agent sampled: a model name (`parity model list`) or folder the local stack serves, or the URL of an OpenAI-compatible server returning prompt logprobs (vLLM), or the URLs of several replicas of one teacher, comma-separated (a step's samples are spread over them); it must share the model's tokenizer",
        group="distillation",
    )
    teacher_model: str = setting(
        "",
        "the model to ask the teacher's server for; empty: the first it lists",
        group="distillation",
    )
    teacher_coef: float = setting(
        1.0,
        "weight of the teacher's per-token signal (teacher minus student logprob of each sampled token) in its advantage",
        group="distillation",
    )
    reward_coef: float = setting(
        1.0,
        "weight of the reward's advantage; 0 trains on the teacher alone (no reward function needed)",
        group="distillation",
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if (
                choices
                and getattr(self, f.name) is not None
                and getattr(self, f.name) not in choices
            ):
                raise SettingsError(
                    f.name, f"must be one of {', '.join(choices)}; got {getattr(self, f.name)!r}"
                )
        for key in ("groups_per_batch", "ppo_epochs", "micro_batch_tokens", "ray_nodes"):
            _check(key, getattr(self, key), lambda v: v >= 1, "must be at least 1")
        for key in (
            "max_policy_lag",
            "checkpoint_interval",
            "ray_workers_per_node",
            "lora_rank",
            "lora_alpha",
            "kl_coef",
            "teacher_coef",
            "reward_coef",
        ):
            _check(key, getattr(self, key), lambda v: v >= 0, "must not be negative")
        if self.learning_rate is not None:
            _check(
                "learning_rate",
                self.learning_rate,
                lambda v: 0 < v < math.inf,
                "must be greater than 0",
            )
        _check(
            "max_grad_norm",
            self.max_grad_norm,
            lambda v: 0 < v < math.inf,
            "must be greater than 0",
        )
        _check("clip_ratio", self.clip_ratio, lambda v: 0 < v < 1, "must be between 0 and 1")
        _check("tis_cap", self.tis_cap, lambda v: 1 <= v < math.inf, "must be at least 1")
        _check(
            "lora_dropout",
            self.lora_dropout,
            lambda v: 0 <= v < 1,
            "must be at least 0 and below 1",
        )
        if self.ray_nodes > 1 and not self.ray_workers_per_node:
            raise SettingsError(
                "ray_nodes",
                "spreads Ray ranks over nodes; set ray_workers_per_node (ranks on each) too",
            )
        if self.ray_workers_per_node and self.backend == "cpu":
            raise SettingsError(
                "ray_workers_per_node",
                "places fsdp ranks as Ray actors; the cpu backend trains in the trainer process",
            )
        if not self.reward_coef and not self.teacher:
            raise SettingsError(
                "reward_coef",
                "0 leaves nothing to learn from without a teacher; set teacher, or a reward_coef above 0",
            )
        if self.teacher and not self.teacher_coef and not self.reward_coef:
            raise SettingsError("teacher_coef", "and reward_coef are both 0: nothing to learn from")
        urls = self.teacher_urls
        if len(urls) > 1 and not all(map(is_url, urls)):
            raise SettingsError(
                "teacher",
                f"names a teacher's replicas by their servers' http(s) URLs, comma-separated; got {self.teacher!r}",
            )
        modules = self.lora_modules
        if not all(modules):
            raise SettingsError(
                "lora_target_modules",
                f"must be module names separated by commas, got {self.lora_target_modules!r}",
            )
        if ALL_LINEAR in modules and len(modules) > 1:
            raise SettingsError(
                "lora_target_modules",
                f"{ALL_LINEAR!r} stands alone, got {self.lora_target_modules!r}",
            )

    @property
    def lora_modules(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.lora_target_modules.split(","))

    @property
    def teacher_urls(self) -> list[str]:
        """The teacher's replicas when `teacher` names its servers (comma-separated); else `teacher` alone."""
        return [part.strip() for part in self.teacher.split(",")] if self.teacher else []

    def update_values(self) -> dict[str, Any]:
        """The UpdateSettings fields of this object, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(UpdateSettings)}


def to_run_config(settings: UpdateSettings, **fields: Any) -> run_pb2.RunConfig:
    """A RunConfig carrying every update setting, plus the run's own fields (model_path, total_steps, ...)."""
    config = run_pb2.RunConfig(**fields)
    for name, value in settings.update_values().items():
        if name in LORA_FIELDS or name in TEACHER_FIELDS:
            continue
        proto_field = _CONFIG.fields_by_name[name]
        if proto_field.enum_type is not None:
            setattr(config, name, _enum_number(proto_field.enum_type, value))
        elif value is not None:
            setattr(config, name, value)
    if settings.lora_rank:
        config.lora.CopyFrom(run_pb2.LoraConfig(
            rank=settings.lora_rank, alpha=settings.lora_alpha, target_modules=settings.lora_modules,
            dropout=settings.lora_dropout,
        ))  # fmt: skip
    if settings.teacher:
        first, *others = settings.teacher_urls
        config.teacher.CopyFrom(
            run_pb2.TeacherConfig(url=first, model=settings.teacher_model, replica_urls=others)
        )
    return config


def from_run_config(config: run_pb2.RunConfig) -> dict[str, Any]:
    """The update settings a RunConfig sets, by field name: unset fields are left out, so they take the default.

    Raises SettingsError naming the proto field (`lora.rank`) for a value no setting can hold.
    """
    values: dict[str, Any] = {}
    for f in dataclasses.fields(UpdateSettings):
        if f.name in LORA_FIELDS or f.name in TEACHER_FIELDS:
            continue
        proto_field = _CONFIG.fields_by_name[f.name]
        if proto_field.containing_oneof is not None and not config.HasField(f.name):
            continue
        value = getattr(config, f.name)
        if proto_field.enum_type is not None:
            if value == 0:
                continue
            value = _enum_choice(f, proto_field.enum_type, value)
        values[f.name] = value
    if config.HasField("lora"):
        lora = config.lora
        if lora.rank < 1:
            raise SettingsError(
                "lora.rank",
                f"must be at least 1, got {lora.rank} (leave lora unset to train the whole model)",
            )
        values.update(lora_rank=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      lora_target_modules=",".join(lora.target_modules) or ALL_LINEAR)  # fmt: skip
    if config.HasField("teacher"):
        if not config.teacher.url:
            raise SettingsError(
                "teacher.url", "is required (leave teacher unset to train without one)"
            )
        for index, url in enumerate(config.teacher.replica_urls):
            if not is_url(url):
                raise SettingsError(
                    "teacher.replica_urls", f"entry {index} must be an http(s) URL, got {url!r}"
                )
        values.update(teacher=",".join([config.teacher.url, *config.teacher.replica_urls]),
                      teacher_model=config.teacher.model)  # fmt: skip
    return values


def is_url(text: str) -> bool:
    """A teacher named by its server's address rather than by a model name or folder."""
    return text.startswith(("http://", "https://"))


def proto_path(key: str) -> str:
    """Where a setting sits in RunConfig: `lora_rank` is `lora.rank`, `teacher` is `teacher.url`."""
    if key in TEACHER_FIELDS:
        return f"teacher.{TEACHER_FIELDS[key]}"
    return f"lora.{LORA_FIELDS[key]}" if key in LORA_FIELDS else key


def _enum_number(enum: EnumDescriptor | UpbEnumDescriptor, choice: str) -> int:
    # A choice with no value of its own (backend and dtype "auto") is what unspecified means.
    value = enum.values_by_name.get(_enum_prefix(enum) + choice.upper().replace("-", "_"))
    return value.number if value is not None else 0


def _enum_choice(
    f: dataclasses.Field[Any], enum: EnumDescriptor | UpbEnumDescriptor, number: int
) -> str:
    value = enum.values_by_number.get(number)
    by_name = {
        _enum_prefix(enum) + choice.upper().replace("-", "_"): choice
        for choice in f.metadata["choices"]
    }
    if value is None or value.name not in by_name:
        raise SettingsError(f.name, f"unknown {enum.name} value {number}")
    return by_name[value.name]


def _enum_prefix(enum: EnumDescriptor | UpbEnumDescriptor) -> str:
    return enum.values_by_number[0].name.removesuffix("UNSPECIFIED")


def _check(key: str, value: Any, holds: Any, requirement: str) -> None:
    if not holds(value):
        raise SettingsError(key, f"{requirement}, got {value}")
