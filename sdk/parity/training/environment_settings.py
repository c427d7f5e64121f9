"""What `parity train` takes to train on a verifiers environment: `env = "verifiers:PACKAGE"`.

An installed verifiers environment brings its tasks and the rewards that score them; Parity brings the
harness that plays them (parity.training.verifiers_environment). These settings say which package, its
taskset's settings, how many of its tasks to train and validate on, which interpreter has it installed,
whether the harness streams, and whether a rollout's first call must call a tool. TrainSettings is made of
these fields too: each is a flag, a TOML key (`env_options` also an `[env_options]` table) and a keyword
of `parity.train()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity.core.settings_fields import SettingsError, setting
from parity.training.suite_settings import check_options, check_sizes

ENV_PREFIX = "verifiers:"


# kw_only: TrainSettings' own fields keep their places as positional arguments.
@dataclass(frozen=True, kw_only=True)
class EnvironmentSettings:
    env: str = setting(
        "",
        "a verifiers environment to train on, as verifiers:PACKAGE (an installed package): its tasks and rewards, played by Parity's harness (the env_ settings; see docs/training.md)",
        group="environment",
    )
    env_options: dict[str, Any] | None = setting(
        None,
        "env = verifiers:PACKAGE: its taskset's settings, as KEY=VALUE pairs (num_tasks=200) or an [env_options] table; none: the taskset's defaults",
        group="environment",
    )
    env_size: int = setting(
        64,
        "env = verifiers:PACKAGE: how many of its tasks to train on (its first ones)",
        group="environment",
    )
    env_val_size: int = setting(
        32,
        "env = verifiers:PACKAGE: how many of its tasks after the training ones to validate on when val_tasks is not set; 0: none",
        group="environment",
    )
    env_python: str = setting(
        "",
        "env = verifiers:PACKAGE: the Python interpreter that has verifiers and the package installed; empty: the one parity train runs in",
        group="environment",
    )
    env_stream: bool = setting(
        False,
        "env = verifiers:PACKAGE: the harness asks for streamed replies instead of whole ones",
        group="environment",
    )
    env_require_tool: bool = setting(
        False,
        "env = verifiers:PACKAGE: a rollout's first call must call one of the task's tools (tool_choice required), for a model that does not call tools on its own yet; later calls choose",
        group="environment",
    )

    def _check_environment(self, tasks: str, named_agent: str) -> None:
        check_options(self, "env_options", "the taskset's settings")
        check_sizes(self, "env_size", "env_val_size")
        if not self.env:
            for key in ("env_options", "env_python"):
                if getattr(self, key):
                    raise SettingsError(
                        key, "belongs to a verifiers environment; it needs env = verifiers:PACKAGE"
                    )
            return
        if not self.env.startswith(ENV_PREFIX) or not environment_package(self.env):
            raise SettingsError(
                "env", f"must be verifiers:PACKAGE, an installed package's name, got {self.env!r}"
            )
        if tasks:
            raise SettingsError(
                "tasks", "a verifiers environment brings its own tasks; leave tasks out"
            )
        if named_agent:
            raise SettingsError(
                named_agent,
                "a verifiers environment is played by Parity's harness; leave the agent out",
            )


def environment_package(env: str) -> str:
    return env[len(ENV_PREFIX) :].strip()
