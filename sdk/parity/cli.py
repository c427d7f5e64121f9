"""The `parity` command: one entry point for every service and for the local stack.

    parity store|ingest|assembler|trainer serve [flags]   run one gRPC service
    parity up [flags]                                      run the whole stack on this machine
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
    "store": "parity.services.store.service",
    "ingest": "parity.services.ingest.service",
    "assembler": "parity.services.assembler.service",
    "trainer": "parity.services.trainer.service",
}


def _add_service_commands(subparsers: argparse._SubParsersAction) -> None:
    for name, module_name in SERVICE_MODULES.items():
        service_parser = subparsers.add_parser(name, help=f"the {name} service")
        actions = service_parser.add_subparsers(dest="action", required=True)
        try:
            definition = importlib.import_module(module_name).DEFINITION
        except ImportError as error:
            serve = actions.add_parser("serve", help=f"unavailable: {error}")
            serve.set_defaults(handler=_missing_extra(name, error))
            continue
        serve = actions.add_parser("serve", help=definition.description)
        definition.add_arguments(serve)
        serve.set_defaults(handler=definition.serve)


def _missing_extra(name: str, error: ImportError) -> Callable[[argparse.Namespace], int]:
    def handler(_: argparse.Namespace) -> int:
        print(f"parity {name} needs its extra: pip install 'parity[{name}]' ({error})", file=sys.stderr)
        return 2

    return handler


def _add_lazy_command(
    subparsers: argparse._SubParsersAction, name: str, action: str, help_text: str, module_name: str
) -> None:
    """A command whose module (and heavy imports) load only when it runs."""
    parser = subparsers.add_parser(name, help=help_text)
    actions = parser.add_subparsers(dest="action", required=True)
    command = actions.add_parser(action, help=help_text, add_help=False)
    command.set_defaults(handler=lambda args: importlib.import_module(module_name).main(args.rest))
    command.add_argument("rest", nargs=argparse.REMAINDER)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parity", description="Token-exact RL for OpenAI-API agents.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_service_commands(subparsers)
    up = subparsers.add_parser("up", help="run store, ingest, assembler, trainer and vLLM locally", add_help=False)
    up.add_argument("rest", nargs=argparse.REMAINDER)
    up.set_defaults(handler=lambda args: importlib.import_module("parity.services.stack.up").main(args.rest))
    _add_lazy_command(
        subparsers, "model", "generate", "write the small test model", "parity.services.inference.tiny_model"
    )
    _add_lazy_command(
        subparsers, "vllm", "serve", "run one vLLM replica", "parity.services.inference.vllm_launcher"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
