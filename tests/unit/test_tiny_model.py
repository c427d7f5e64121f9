"""The tiny model is reproducible from its seed and loads as an ordinary Qwen2 checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model

# Chat messages as transformers' chat templates take them; a tool call's content is None, its calls a list.
QUESTION: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 3?"}]
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
TOOL_CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "2 + 3"}'},
        }
    ],
}
TOOL_RESULT: dict[str, Any] = {"role": "tool", "tool_call_id": "call_1", "content": "5"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_tiny_model(tmp_path_factory.mktemp("seed0"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(model_dir)


def file_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_same_seed_writes_identical_bytes(model_dir: Path, tmp_path: Path) -> None:
    again = generate_tiny_model(tmp_path)

    assert file_bytes(again) == file_bytes(model_dir)


def test_other_seed_changes_weights_but_not_tokenizer(model_dir: Path, tmp_path: Path) -> None:
    other = file_bytes(generate_tiny_model(tmp_path, TinyModelSpec(seed=1)))
    original = file_bytes(model_dir)

    assert other["model.safetensors"] != original["model.safetensors"]
    assert other["tokenizer.json"] == original["tokenizer.json"]


def test_loads_as_float32_qwen2_with_head_dim_64_and_untied_embeddings(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir)

    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.dtype == torch.float32
    assert model.model.layers[0].self_attn.head_dim == 64
    assert model.config.tie_word_embeddings is False
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)


def test_tied_embeddings_share_one_matrix_as_in_small_hub_models(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    tied = generate_tiny_model(tmp_path, TinyModelSpec(tie_embeddings=True))
    model = AutoModelForCausalLM.from_pretrained(tied)

    assert model.config.tie_word_embeddings is True
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # Like Qwen2.5-0.5B's checkpoint: the embeddings only.
    assert "lm_head.weight" not in load_file(tied / "model.safetensors")


def test_tokenizer_fills_the_vocabulary_and_ends_turns_with_im_end(
    model_dir: Path, tokenizer: PreTrainedTokenizerBase
) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    generation = json.loads((model_dir / "generation_config.json").read_text())

    assert len(tokenizer) == config["vocab_size"]
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]
    for token in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"]:
        assert tokenizer.tokenize(token) == [token]


def test_numbers_tokenize_digit_by_digit(tokenizer: PreTrainedTokenizerBase) -> None:
    tokens = tokenizer.tokenize("12 + 345 = 357")

    assert [t for t in tokens if any(c.isdigit() for c in t)] == list("12345357")
    assert tokenizer.decode(tokenizer.encode("12 + 345 = 357")) == "12 + 345 = 357"


def test_chat_template_renders_tools_tool_calls_and_tool_results(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    text = tokenizer.apply_chat_template(
        [*QUESTION, TOOL_CALL, TOOL_RESULT],
        tools=[CALCULATOR],
        add_generation_prompt=True,
        tokenize=False,
    )

    assert isinstance(text, str)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert f"<tools>\n{json.dumps(CALCULATOR)}\n</tools>" in text
    assert (
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n'
        "</tool_call><|im_end|>\n"
    ) in text
    assert "<|im_start|>tool\n5<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "reply", [{"role": "assistant", "content": "The answer is 5."}, TOOL_CALL], ids=["text", "tool"]
)
def test_assistant_turn_extends_the_generation_prompt(
    tokenizer: PreTrainedTokenizerBase, reply: dict[str, Any]
) -> None:
    # A sampled turn's tokens must sit on the prompt unchanged when the conversation is re-rendered.
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    conversation = tokenizer.apply_chat_template([*QUESTION, reply], tokenize=False)

    assert isinstance(prompt, str) and isinstance(conversation, str)
    assert conversation.startswith(prompt)
