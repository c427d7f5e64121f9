"""What a run is given, resolved and checked before anything starts: settings, agent, tasks, run id."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from parity.engine.runner import Agent
from parity.training.agent_server import AgentServer
from parity.training.agents import CommandAgent, load_callable, parse_command
from parity.training.settings import SettingsError, TrainSettings
from parity.training.suite_settings import is_suite
from parity.training.tasks import load_tasks, tasks_from_objects

SETTINGS_FILE = "settings.json"
"""In the run's folder: the settings it ran with, which a resume starts from."""

Tasks = str | Path | Sequence[Mapping[str, Any]]


def resolve_settings(settings: TrainSettings | None, values: dict[str, Any]) -> TrainSettings:
    """`values` over `settings`; with `resume`, over the run's saved settings."""
    resume = values.get("resume") or (settings.resume if settings else "")
    if resume:
        output_dir = Path(values.get("output_dir") or (settings.output_dir if settings else "runs"))
        saved = output_dir / resume / SETTINGS_FILE
        if not saved.exists():
            raise SettingsError(
                "resume", f"no run {resume!r} in {output_dir.resolve()} (no {SETTINGS_FILE})"
            )
        base = TrainSettings.from_json(json.loads(saved.read_text()))
        return base.replace(**(values | {"resume": resume}))
    return (
        (settings or TrainSettings()).replace(**values) if values else (settings or TrainSettings())
    )


def named_inputs(
    agent: Agent | str | None, tasks: Tasks | None, val_tasks: Tasks | None
) -> dict[str, str]:
    """The settings an agent named by its import path, and tasks named by their file, stand for."""
    named = {"agent": agent} if isinstance(agent, str) else {}
    for name, given in (("tasks", tasks), ("val_tasks", val_tasks)):
        # An empty string is "none" (no validation), not the current directory; a suite's name is no path.
        if is_suite(given):
            named[name] = str(given)
        elif isinstance(given, Path) or (isinstance(given, str) and given):
            named[name] = str(Path(given).resolve())
        elif given == "":
            named[name] = ""
    return named


def resolve_inputs(
    agent: Callable[..., Any] | None, tasks: Tasks | None, val_tasks: Tasks | None, settings: TrainSettings
) -> tuple[Agent | None, list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """The run's agent, tasks and validation tasks. A from-store run rolls out no tasks, and needs an agent
    only to validate."""
    validation = resolve_tasks(val_tasks, settings.val_tasks, "val_tasks", required=False)
    if settings.env:
        return environment_inputs(agent, tasks, settings, validation)
    suite = suite_inputs(agent, settings, validation) if is_suite(settings.tasks) else None
    if suite is not None:
        validation = suite[2]
    if settings.promote and not validation:
        raise SettingsError(
            "promote", "the gate compares validations before and after training; give val_tasks"
        )
    if suite is not None:
        return suite
    if not settings.from_store:
        return (
            resolve_agent(agent, settings),
            resolve_tasks(tasks, settings.tasks, "tasks"),
            validation,
        )
    if tasks is not None:
        raise SettingsError(
            "tasks", "a from_store run trains on stored sessions and rolls out no tasks"
        )
    named = agent is not None or settings.agent or settings.agent_command or settings.agent_server
    return (resolve_agent(agent, settings) if named or validation else None), [], validation


def suite_inputs(
    agent: Callable[..., Any] | None, settings: TrainSettings, validation: list[dict[str, Any]]
) -> tuple[Agent, list[dict[str, Any]], list[dict[str, Any]]]:
    """A reasoning-gym suite's tasks, its held-out tasks unless val_tasks names others, and the agent: the
    single-call one unless another is named."""
    from parity.training import reasoning_gym_tasks

    tasks, held_out = reasoning_gym_tasks.suite_tasks(settings)
    named = agent is not None or settings.agent or settings.agent_command or settings.agent_server
    chosen = resolve_agent(agent, settings) if named else reasoning_gym_tasks.solve
    return chosen, tasks, validation or held_out


def environment_inputs(
    agent: Callable[..., Any] | None, tasks: Tasks | None, settings: TrainSettings, validation: list[dict[str, Any]]
) -> tuple[Agent, list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """A verifiers environment's tasks, its held-out tasks unless val_tasks names others, and the bridge that
    plays them."""
    from parity.training import verifiers_environment

    if agent is not None:
        raise SettingsError(
            "agent", "a verifiers environment is played by Parity's harness; pass no agent"
        )
    if tasks is not None:
        raise SettingsError("tasks", "a verifiers environment brings its own tasks; pass none")
    train, held_out = verifiers_environment.environment_tasks(settings)
    return verifiers_environment.environment_agent(settings), train, validation or held_out


def resolve_agent(agent: Callable[..., Any] | None, settings: TrainSettings) -> Agent:
    if agent is not None:
        if settings.agent or settings.agent_command or settings.agent_server:
            raise SettingsError(
                "agent", "an agent function was passed and one is named in the settings too"
            )
        return agent
    if settings.agent:
        return load_callable(settings.agent, "agent")
    if settings.agent_command:
        reward = load_callable(settings.reward, "reward") if settings.reward else None
        return CommandAgent(parse_command(settings.agent_command), reward)
    if settings.agent_server:
        reward = load_callable(settings.reward, "reward") if settings.reward else None
        return AgentServer(parse_command(settings.agent_server, "agent_server"), reward)
    raise SettingsError(
        "agent",
        "name the agent: agent = pkg.module:function, agent_command = a command run per rollout, or agent_server = "
        "a command that serves them all",
    )


def resolve_tasks(
    given: Tasks | None, path: str, name: str, required: bool = True
) -> list[dict[str, Any]]:
    if given is not None and not isinstance(given, str | Path):
        return tasks_from_objects(given, name)
    if path:
        return load_tasks(path)
    if required:
        raise SettingsError(
            name,
            "is required: a .jsonl or .parquet file, a datasets folder, or a list of task dicts",
        )
    return []


def keep_given_tasks(
    settings: TrainSettings, run_dir: Path, tasks: list[dict[str, Any]], val_tasks: list[dict[str, Any]]
) -> TrainSettings:  # fmt: skip
    """Tasks handed over as objects are written into the run folder, so a resume finds them; the settings returned
    name those files."""
    for name, given in (("tasks", tasks), ("val_tasks", val_tasks)):
        # A verifiers environment's training tasks are loaded again on resume, as a suite's are generated again.
        if given and not getattr(settings, name) and not (name == "tasks" and settings.env):
            path = run_dir / f"{name}.jsonl"
            path.write_text("".join(json.dumps(task, default=str) + "\n" for task in given))
            settings = settings.replace(**{name: str(path)})
    return settings


def run_folder(settings: TrainSettings) -> tuple[str, Path]:
    """The run's id and folder: a resumed run's own, or a new run's, which may not hold another run already."""
    run_id = settings.resume or settings.run_id or new_run_id()
    run_dir = Path(settings.output_dir).resolve() / run_id
    if not settings.resume and (run_dir / SETTINGS_FILE).exists():
        raise SettingsError(
            "run_id", f"{run_dir} already holds run {run_id}; resume it or name another"
        )
    return run_id, run_dir


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
