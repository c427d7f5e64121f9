"""A model's training defaults: the named models' own, else by the folder: the test model's, else by size."""

from __future__ import annotations

import json

from parity.core.model_defaults import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    TEST_MODEL,
    learning_rate,
    learning_rate_for_size,
    max_tokens,
)


def test_learning_rates_follow_the_model(tmp_path, tiny_model_dir) -> None:
    assert learning_rate("", tmp_path) == KNOWN_MODELS[DEFAULT_MODEL].learning_rate == 1e-5
    assert learning_rate(TEST_MODEL, tmp_path) == 1e-3
    # A folder of the generated model is still the test model; a folder of a real one goes by its size.
    assert learning_rate(str(tiny_model_dir), tiny_model_dir) == 1e-3
    assert [learning_rate_for_size(n) for n in (135_000_000, 500_000_000, 7_000_000_000)] == [
        1e-5,
        1e-6,
        5e-7,
    ]
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4_000_000]}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert learning_rate(str(tmp_path), tmp_path) == 1e-5


def test_a_folder_not_on_this_machine_gets_the_rate_for_a_few_billion_parameters(tmp_path) -> None:
    elsewhere = tmp_path / "on-the-trainers-host"
    assert learning_rate(str(elsewhere), elsewhere) == 1e-6


def test_max_tokens_follow_the_named_model() -> None:
    assert max_tokens("") == max_tokens(DEFAULT_MODEL) == 64
    assert max_tokens(TEST_MODEL) == max_tokens("/models/mine") == 256
