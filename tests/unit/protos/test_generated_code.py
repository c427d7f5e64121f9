"""The committed generated code must be exactly what the protos generate today, with the generator
`make protos` runs (requirements/protoc.txt, in .venv-protoc): another protoc writes other code and
changes the protobuf range the SDK supports."""

import filecmp
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# The messages and stubs, and the typed clients over them in the client layer.
GENERATED_PACKAGES = (Path("parity") / "api", Path("parity") / "clients" / "generated")
GENERATOR_PYTHON = REPO_ROOT / ".venv-protoc" / "bin" / "python"


def _relative_files(root: Path) -> set[Path]:
    return {
        p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_generated_code_is_fresh(tmp_path: Path) -> None:
    if not GENERATOR_PYTHON.exists():
        pytest.fail(
            f"the code generator's environment is missing ({GENERATOR_PYTHON}): run `make env`",
            pytrace=False,
        )
    subprocess.run(
        [
            str(GENERATOR_PYTHON),
            str(REPO_ROOT / "scripts" / "generate_protos.py"),
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    for package in GENERATED_PACKAGES:
        committed, fresh = REPO_ROOT / "sdk" / package, tmp_path / package
        committed_files, fresh_files = _relative_files(committed), _relative_files(fresh)
        assert committed_files == fresh_files, (
            f"generated files in {package} differ; run `make protos`: "
            f"missing {sorted(map(str, fresh_files - committed_files))}, "
            f"extra {sorted(map(str, committed_files - fresh_files))}"
        )
        stale = [
            str(p)
            for p in sorted(fresh_files)
            if not filecmp.cmp(committed / p, fresh / p, shallow=False)
        ]
        assert not stale, f"stale generated code in {package}, run `make protos`: {stale}"


def test_every_area_is_importable_from_the_sdk() -> None:
    from parity.api.assembler.v1 import assembler_service_pb2_grpc
    from parity.api.common.v1 import llm_call_pb2
    from parity.api.ingest.v1 import ingest_service_pb2_grpc
    from parity.api.store.v1 import store_service_pb2_grpc
    from parity.api.trainer.v1 import trainer_service_pb2_grpc

    assert llm_call_pb2.LlmCall.DESCRIPTOR.full_name == "parity.api.common.v1.LlmCall"
    for module in (
        store_service_pb2_grpc,
        ingest_service_pb2_grpc,
        assembler_service_pb2_grpc,
        trainer_service_pb2_grpc,
    ):
        assert any(name.endswith("ServiceStub") for name in dir(module))
