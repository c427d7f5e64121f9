"""The SDK at both ends of the dependency range it declares: every base dependency at its lowest declared
release, and at the newest pip finds inside the ranges, in fresh environments. Each writes a call to a real
store through the generated clients and reads it back unchanged (docs/sdk.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parity.core.supported_versions import SUPPORTED, release
from tests.integration.sdk.isolated_envs import base_dependencies, build_wheel, cached_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCRIPT = Path(__file__).parent / "env_scripts" / "sdk_roundtrip.py"


def lowest_releases() -> list[str]:
    """`name==LOW` for each base dependency's declared lower bound."""
    pins = []
    for requirement in base_dependencies():
        declared = re.match(r"([A-Za-z0-9_.-]+)\S*?>=([^,;\s]+)", requirement)
        assert declared is not None, f"no lower bound in {requirement!r}"
        name, low = declared.groups()
        pins.append(f"{name}=={low}")
    return pins


@pytest.fixture(scope="module")
def store(module_services):
    return module_services.start("store", "--url", "memory://")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.parametrize("end", ["lowest", "highest"])
def test_the_sdk_round_trips_a_call_at_each_end_of_its_range(end: str, store, wheel: Path) -> None:
    requirements = lowest_releases() if end == "lowest" else []
    env = cached_env(f"sdk-{end}", requirements, wheel)
    finished = env.run(str(SCRIPT), store.address, f"ends-{end}", timeout=120)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    assert report["written"] == 1
    protobuf, grpcio = release(report["protobuf"]), release(report["grpcio"])
    if end == "lowest":
        assert (protobuf, grpcio) == (SUPPORTED["protobuf"][0], SUPPORTED["grpcio"][0])
        for pin in requirements:
            name, version = pin.split("==")
            assert release(env.versions[name.lower()]) == release(
                version + ".0" * (2 - version.count("."))
            ), pin
    else:
        # The newest protobuf inside the range is of its last supported major.
        protobuf_high = SUPPORTED["protobuf"][1]
        assert protobuf_high is not None, "protobuf's range has an upper bound"
        assert protobuf[0] == protobuf_high[0] - 1 and grpcio > SUPPORTED["grpcio"][0]
