import argparse
from typing import Any

import pytest

from parity.services.ingest.serve_command import IngestConfig
from parity.services.runtime.config import ServerConfig, add_config_arguments, config_from_args
from parity.services.runtime.errors import InvalidArgument
from parity.services.store.serve_command import StoreConfig


def parse(config_cls, argv: list[str]):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, config_cls, "store")
    return config_from_args(config_cls, parser.parse_args(argv), "store")


def test_defaults_apply_without_flags_or_environment(monkeypatch) -> None:
    monkeypatch.delenv("PARITY_STORE_PORT", raising=False)
    config = parse(StoreConfig, [])
    assert config.port == 50051 and config.url.startswith("sqlite:///")


def test_environment_overrides_default_and_flag_overrides_environment(monkeypatch) -> None:
    monkeypatch.setenv("PARITY_STORE_PORT", "6000")
    monkeypatch.setenv("PARITY_STORE_LOG_LEVEL", "debug")
    assert parse(StoreConfig, []).port == 6000
    config = parse(StoreConfig, ["--port", "7000"])
    assert (config.port, config.log_level) == (7000, "debug")


def test_bad_environment_values_name_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("PARITY_STORE_PORT", "many")
    with pytest.raises(InvalidArgument, match="PARITY_STORE_PORT must be a int"):
        parse(StoreConfig, [])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"port": 70000}, "port must be in"),
        ({"log_level": "loud"}, "log_level must be one of"),
        ({"max_message_mb": 0}, "max_message_mb"),
        ({"shutdown_grace_s": -1}, "shutdown_grace_s"),
    ],
)
def test_invalid_settings_are_rejected(kwargs, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ServerConfig(**kwargs)


def test_store_url_must_name_a_known_backend() -> None:
    with pytest.raises(InvalidArgument, match="url must start with"):
        StoreConfig(url="mysql://x")


@pytest.mark.parametrize("name", ["store_timeout_s", "upstream_timeout_s", "health_interval_s"])
@pytest.mark.parametrize("value", [0.0, -5.0, float("inf"), float("nan")])
def test_ingest_waits_must_be_positive_seconds(name: str, value: float) -> None:
    wait: dict[str, Any] = {name: value}
    with pytest.raises(InvalidArgument, match=f"{name} must be a positive number of seconds"):
        IngestConfig(**wait)
