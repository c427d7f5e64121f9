"""A training run's settings: the domain side of `RunConfig`, validated once, at StartRun."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from parity.api.trainer.v1 import run_pb2
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.compute_defaults import DTYPE_CHOICES, resolve_dtype

# verl's registered names, by the proto enum that selects them.
ADVANTAGE_ESTIMATORS = {
    run_pb2.ADVANTAGE_ESTIMATOR_UNSPECIFIED: "grpo",
    run_pb2.ADVANTAGE_ESTIMATOR_GRPO: "grpo",
    run_pb2.ADVANTAGE_ESTIMATOR_RLOO: "rloo",
    run_pb2.ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: "reinforce_plus_plus",
}
ROLLOUT_MODES = {
    run_pb2.ROLLOUT_MODE_UNSPECIFIED: "sync",
    run_pb2.ROLLOUT_MODE_SYNC: "sync",
    run_pb2.ROLLOUT_MODE_ASYNC: "async",
}
BACKENDS = {
    run_pb2.TRAINING_BACKEND_UNSPECIFIED: "auto",
    run_pb2.TRAINING_BACKEND_FSDP: "fsdp",
    run_pb2.TRAINING_BACKEND_CPU: "cpu",
}
# `RunConfig.overrides` keys the trainer understands, with their types; any other key is refused rather than ignored.
OVERRIDE_TYPES: dict[str, type] = {
    "ppo_epochs": int, "max_grad_norm": float, "loss_agg_mode": str, "seed": int,
    "micro_batch_tokens": int, "ray_workers_per_node": int, "ray_nodes": int, "dtype": str,
}  # fmt: skip
# Compute dtypes a run may train in ("auto": bfloat16 on CUDA, float32 elsewhere, resolved where it
# trains); the master weights and optimizer state stay float32.
TRAINING_DTYPES = DTYPE_CHOICES
# peft's name for every linear layer but the output head, the default LoRA target.
ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class RunSettings:
    model_path: Path = field(metadata={"help": "Hugging Face model directory to train"})
    total_steps: int = field(metadata={"help": "update steps of the run"})
    groups_per_batch: int = field(metadata={"help": "groups (tasks) per training batch"})
    advantage_estimator: str = field(default="grpo", metadata={"help": "verl estimator: grpo, rloo, reinforce_plus_plus"})
    rollout_mode: str = field(default="sync", metadata={"help": "sync: rollouts wait for each update; async: bounded lag"})
    backend: str = field(default="auto", metadata={"help": "cpu, fsdp, or auto (fsdp when a GPU is visible)"})
    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate"})
    clip_ratio: float = field(default=0.2, metadata={"help": "PPO clip range"})
    kl_coef: float = field(default=0.0, metadata={"help": "low-variance KL penalty against the starting policy; 0 off"})
    tis_cap: float = field(default=2.0, metadata={"help": "cap on the trainer/rollout importance ratio per token"})
    max_policy_lag: int = field(default=1, metadata={"help": "policy versions a sample may lag in async mode"})
    checkpoint_dir: Path = field(default=Path("checkpoints"), metadata={"help": "where checkpoints go"})
    checkpoint_interval: int = field(default=0, metadata={"help": "save every N steps; 0 only at the end"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each batch; >1 makes the PPO clip bite"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    loss_agg_mode: str = field(default="token-mean", metadata={"help": "verl agg_loss mode"})
    seed: int = field(default=0, metadata={"help": "torch seed of the run"})
    micro_batch_tokens: int = field(
        default=16384, metadata={"help": "fsdp backend: tokens per micro-batch on each GPU (bounds activation memory)"}
    )
    ray_workers_per_node: int = field(
        default=0, metadata={"help": "fsdp backend: training ranks per node as Ray actors; 0 trains in this process"}
    )
    ray_nodes: int = field(default=1, metadata={"help": "fsdp backend: nodes of the Ray cluster to place ranks on"})
    dtype: str = field(
        default="auto",
        metadata={
            "help": "forward and backward dtype: float32, bfloat16, or auto (bfloat16 on CUDA, else float32), "
            "resolved where the run trains; weights and optimizer stay float32"
        },
    )
    lora_rank: int = field(
        default=0, metadata={"help": "rank of a LoRA adapter trained on the frozen model; 0 trains the whole model"}
    )
    lora_alpha: int = field(default=0, metadata={"help": "LoRA scale numerator (scale alpha/rank); 0 is twice the rank"})
    lora_target_modules: tuple[str, ...] = field(
        default=(ALL_LINEAR,), metadata={"help": "modules LoRA adapts, as peft matches them; all-linear: every linear layer"}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA adapter's input while training"})

    def __post_init__(self) -> None:
        if self.total_steps < 1 or self.groups_per_batch < 1:
            raise InvalidArgument("total_steps and groups_per_batch must be >= 1")
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS.values():
            raise InvalidArgument(f"unknown advantage estimator {self.advantage_estimator!r}")
        if self.rollout_mode not in ("sync", "async") or self.backend not in ("auto", "cpu", "fsdp"):
            raise InvalidArgument(f"bad rollout_mode {self.rollout_mode!r} or backend {self.backend!r}")
        if self.learning_rate <= 0 or not 0 < self.clip_ratio < 1 or self.kl_coef < 0 or self.tis_cap < 1:
            raise InvalidArgument("need learning_rate > 0, 0 < clip_ratio < 1, kl_coef >= 0, tis_cap >= 1")
        if self.max_policy_lag < 0 or self.checkpoint_interval < 0 or self.ppo_epochs < 1 or self.max_grad_norm <= 0:
            raise InvalidArgument("need max_policy_lag >= 0, checkpoint_interval >= 0, ppo_epochs >= 1, max_grad_norm > 0")
        if self.micro_batch_tokens < 1 or self.ray_workers_per_node < 0 or self.ray_nodes < 1:
            raise InvalidArgument("need micro_batch_tokens >= 1, ray_workers_per_node >= 0, ray_nodes >= 1")
        if self.ray_workers_per_node and self.backend == "cpu":
            raise InvalidArgument("ray_workers_per_node places fsdp ranks; the cpu backend trains in this process")
        if self.dtype not in TRAINING_DTYPES:
            raise InvalidArgument(f"unknown dtype {self.dtype!r}; known: {list(TRAINING_DTYPES)}")
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype))
        if self.loss_agg_mode not in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
            raise InvalidArgument(f"unknown loss_agg_mode {self.loss_agg_mode!r}")
        self._check_lora()

    def _check_lora(self) -> None:
        if self.lora_rank < 0:
            raise InvalidArgument(f"lora.rank must be at least 1, got {self.lora_rank}")
        if not self.lora_rank:
            return
        if self.lora_alpha < 0:
            raise InvalidArgument(f"lora.alpha must be at least 1 (0: twice the rank), got {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise InvalidArgument(f"lora.dropout must be in [0, 1), got {self.lora_dropout}")
        modules = self.lora_target_modules
        if not modules or any(not module.strip() for module in modules):
            raise InvalidArgument(f"lora.target_modules must be module names, got {list(modules)}")
        if ALL_LINEAR in modules and len(modules) > 1:
            raise InvalidArgument(f"lora.target_modules: {ALL_LINEAR!r} stands alone, got {list(modules)}")
        if not self.lora_alpha:
            object.__setattr__(self, "lora_alpha", 2 * self.lora_rank)

    @classmethod
    def from_proto(cls, config: run_pb2.RunConfig, default_checkpoint_dir: Path = Path("checkpoints")) -> RunSettings:
        if not config.model_path:
            raise InvalidArgument("model_path is required")
        unknown = set(config.overrides) - set(OVERRIDE_TYPES)
        if unknown:
            raise InvalidArgument(f"unknown overrides {sorted(unknown)}; known: {sorted(OVERRIDE_TYPES)}")
        try:
            overrides = {key: OVERRIDE_TYPES[key](value) for key, value in config.overrides.items()}
        except ValueError as error:
            raise InvalidArgument(f"bad override value: {error}") from None
        optional = {
            "learning_rate": config.learning_rate, "clip_ratio": config.clip_ratio, "kl_coef": config.kl_coef,
            "tis_cap": config.tis_cap, "max_policy_lag": config.max_policy_lag,
            "checkpoint_interval": config.checkpoint_interval,
        }  # fmt: skip
        lora = {}
        if config.HasField("lora"):
            if config.lora.rank < 1:
                raise InvalidArgument(
                    f"lora.rank must be at least 1, got {config.lora.rank} (leave lora unset to train the whole model)"
                )
            lora = {
                "lora_rank": config.lora.rank, "lora_alpha": config.lora.alpha,
                "lora_target_modules": tuple(config.lora.target_modules) or (ALL_LINEAR,),
                "lora_dropout": config.lora.dropout,
            }  # fmt: skip
        return cls(
            model_path=Path(config.model_path),
            total_steps=config.total_steps,
            groups_per_batch=config.groups_per_batch,
            advantage_estimator=ADVANTAGE_ESTIMATORS.get(config.advantage_estimator, "?"),
            rollout_mode=ROLLOUT_MODES.get(config.rollout_mode, "?"),
            backend=BACKENDS.get(config.backend, "?"),
            checkpoint_dir=Path(config.checkpoint_dir) if config.checkpoint_dir else default_checkpoint_dir,
            **{k: v for k, v in optional.items() if v},
            **overrides,  # type: ignore[arg-type]
            **lora,  # type: ignore[arg-type]
        )

    def to_proto(self) -> run_pb2.RunConfig:
        def number(table: dict[int, str], name: str) -> int:
            return next(k for k, v in table.items() if v == name and k != 0)

        lora = run_pb2.LoraConfig(
            rank=self.lora_rank, alpha=self.lora_alpha, target_modules=self.lora_target_modules, dropout=self.lora_dropout
        )
        return run_pb2.RunConfig(
            model_path=str(self.model_path),
            advantage_estimator=number(ADVANTAGE_ESTIMATORS, self.advantage_estimator),
            rollout_mode=number(ROLLOUT_MODES, self.rollout_mode),
            backend=0 if self.backend == "auto" else number(BACKENDS, self.backend),
            total_steps=self.total_steps, groups_per_batch=self.groups_per_batch,
            learning_rate=self.learning_rate, clip_ratio=self.clip_ratio, kl_coef=self.kl_coef,
            tis_cap=self.tis_cap, max_policy_lag=self.max_policy_lag, checkpoint_dir=str(self.checkpoint_dir),
            checkpoint_interval=self.checkpoint_interval,
            overrides={key: str(getattr(self, key)) for key in OVERRIDE_TYPES},
            lora=lora if self.lora_rank else None,
        )  # fmt: skip

    def to_json(self) -> dict[str, object]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> RunSettings:
        values = dict(data)
        values["model_path"] = Path(str(values["model_path"]))
        values["checkpoint_dir"] = Path(str(values["checkpoint_dir"]))
        if "lora_target_modules" in values:
            values["lora_target_modules"] = tuple(values["lora_target_modules"])  # type: ignore[arg-type]
        # A checkpoint written before the setting existed trained in float32.
        values.setdefault("dtype", "float32")
        return cls(**values)  # type: ignore[arg-type]
