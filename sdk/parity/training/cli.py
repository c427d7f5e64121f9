"""`parity train`: one command from an agent, tasks and a model to a trained, exported model.

    parity train --agent my_agent:solve --tasks tasks.jsonl --val-tasks val.jsonl --steps 30
    parity train --config train.toml --learning-rate 3e-3     # a flag overrides the file
    parity train --resume RUN_ID                              # continue a stopped or failed run

Progress and messages go to stderr; the last line on stdout is the run's result as one
JSON object. Exit codes: 0 completed, 1 failed, 2 bad input (nothing was started),
130 stopped with Ctrl-C, 143 stopped by SIGTERM (both resumable).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import structlog

from parity.training.agents import AgentError
from parity.training.config_file import ConfigError, SettingsSources, load_file
from parity.training.settings import (
    SettingsError,
    StackAddresses,
    field_types,
    settings_fields,
    value_kind,
)
from parity.training.suite_settings import parse_options
from parity.training.tasks import TaskFileError

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED, EXIT_TERMINATED = 1, 2, 130, 143
GROUP_TITLES = {
    "agent": "the agent", "data": "tasks and model", "suite": "generated tasks (reasoning-gym)", "environment": "verifiers environments", "schedule": "how long", "sampling": "sampling",
    "validation": "validation", "optimization": "the update", "lora": "LoRA", "distillation": "distillation", "rollouts": "rollouts", "budgets": "session budgets",
    "production": "training from stored production sessions", "output": "output",
    "stack": "where it runs",
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parity train", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Every flag is also a key of the TOML file (rollouts_per_task = 8); see docs/training.md.",
    )  # fmt: skip
    parser.add_argument("--config", type=Path, help="a TOML file of settings; flags override it")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                        help="log lines on stderr at this level and above (default warning)")  # fmt: skip
    hints = field_types()
    groups = {name: parser.add_argument_group(title) for name, title in GROUP_TITLES.items()}
    for field in settings_fields():
        flag = "--" + field.name.replace("_", "-")
        group = groups[field.metadata["group"]]
        help_text = f"{field.metadata['help']} (default: {_shown(field.default)})"
        kind = value_kind(hints[field.name])
        if field.name == "stack":
            group.add_argument(
                flag, type=_stack, default=None, metavar="NAME=ADDRESS,...", help=help_text
            )
        elif field.name in ("suite_options", "env_options"):
            group.add_argument(
                flag, type=functools.partial(_options, setting_name=field.name), default=None,
                metavar="KEY=VALUE,...", help=help_text,
            )  # fmt: skip
        elif kind is bool:
            group.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            group.add_argument(
                flag, type=kind, default=None, choices=field.metadata.get("choices"), help=help_text
            )
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, as a supervisor sends it (`kill`, `timeout`, systemd, a Kubernetes pod's end), taken as Ctrl-C is:
    the run stops after its step with a checkpoint and the stack goes down. Without it the process would die at
    once, losing the step and leaving no result line."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    terminated: list[int] = []

    def terminate(signum: int, frame: Any) -> None:
        if terminated:
            return  # the stop is under way: a repeat would cut its checkpoint short
        terminated.append(signum)
        raise Terminated(f"stopped by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, terminate)
    from parity.training.trainer import train

    known = {field.name for field in settings_fields()}
    flags = {
        name: value for name, value in vars(args).items() if name in known and value is not None
    }
    try:
        file_values, sources = load_file(args.config) if args.config else ({}, SettingsSources())
        sources.flags = set(flags)
        result = _run(train, file_values | flags, sources)
    except (ConfigError, TaskFileError, AgentError) as error:
        print(f"parity train: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.exported_model:
        print(
            f"the trained model is in {result.exported_model}; serve it with: {result.serve_command}",
            file=sys.stderr,
        )
    elif result.resume_command:
        print(f"resume with: {result.resume_command}", file=sys.stderr)
    if result.promotion:
        print(f"parity train: {result.promotion}", file=sys.stderr)
    if result.error:
        print(f"parity train: the run {result.state}: {result.error}", file=sys.stderr)
    if result.warning:
        print(f"parity train: {result.warning}", file=sys.stderr)
    print(json.dumps(result.to_json()), flush=True)
    if result.ok:
        return 0
    if result.state == "stopped":
        return EXIT_TERMINATED if terminated else EXIT_STOPPED
    return EXIT_FAILED


def _run(train: Any, values: dict[str, Any], sources: SettingsSources) -> Any:
    try:
        return train(**values)
    except SettingsError as error:
        raise ConfigError(f"{sources.where(error.key)}: {error.message}") from None


def _stack(text: str) -> StackAddresses:
    try:
        return StackAddresses.parse(text)
    except SettingsError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def _options(text: str, setting_name: str) -> dict[str, Any]:
    try:
        return parse_options(text, setting_name)
    except SettingsError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def _shown(default: Any) -> str:
    return "none" if default is None or default == "" else str(default)


def _configure_logging(level: str) -> None:
    """structlog prints to stdout unless told otherwise; stdout is for the result line alone."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


if __name__ == "__main__":
    sys.exit(main())
