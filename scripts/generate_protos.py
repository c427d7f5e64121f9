"""Regenerate the Python code for protos/ into sdk/parity/api.

Usage: python scripts/generate_protos.py [--out DIR]

The proto folder layout matches the Python package (`parity/api/<area>/v1`), so
protoc's imports are correct as generated and nothing is post-processed. The
staleness test runs this into a temporary folder and diffs it with the tree.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
SDK_ROOT = REPO_ROOT / "sdk"
GENERATED_PACKAGE = Path("parity") / "api"
PACKAGE_DOCSTRING = '"""Generated from protos/ by scripts/generate_protos.py. Do not edit."""\n'


def proto_files() -> list[Path]:
    return sorted(p.relative_to(PROTO_ROOT) for p in (PROTO_ROOT / GENERATED_PACKAGE).rglob("*.proto"))


def generate(out_root: Path) -> None:
    """Write the generated package `parity/api` under out_root, replacing any old one."""
    target = out_root / GENERATED_PACKAGE
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    well_known_types = str(files("grpc_tools") / "_proto")
    sources = [str(p) for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known_types}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for package_dir in [target, *sorted(p for p in target.rglob("*") if p.is_dir())]:
        (package_dir / "__init__.py").write_text(PACKAGE_DOCSTRING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SDK_ROOT, help="root to write parity/api into")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        # Generate aside and swap in, so a protoc error never leaves a half-written package.
        generate(Path(scratch))
        final = args.out / GENERATED_PACKAGE
        if final.exists():
            shutil.rmtree(final)
        shutil.copytree(Path(scratch) / GENERATED_PACKAGE, final)
    print(f"generated {len(proto_files())} protos into {args.out / GENERATED_PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
