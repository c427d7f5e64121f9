"""A tiny, deterministic Qwen2 model with its own tokenizer and chat template.

Tests and local runs need a model that vLLM serves on a CPU in seconds and that no hub download
provides: this module writes one from a seed. Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from parity.core.model_defaults import TEST_MODEL_MARKER

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
# Plain (not special) added tokens, as in Qwen2.5: vLLM's `hermes` tool-call parser looks them up in
# the vocabulary, and skip_special_tokens must not strip them from the text it parses.
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>"]

# Qwen2's pre-tokenizer split: every digit is its own pre-token, so numbers tokenize digit by digit
# and arithmetic never depends on which multi-digit merges the corpus happened to produce.
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The tokenizer corpus does not depend on the model seed: every tiny model shares one vocabulary,
# so token ids recorded against one seed stay meaningful for another.
CORPUS_SEED = 20240601

# ChatML as Qwen2.5 writes it, with two changes that keep token prefixes stable for RL:
# an assistant turn always starts with "<|im_start|>assistant\n" (exactly the generation prompt),
# and tool results are their own `tool` turn instead of being folded into a user turn.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and ' }}
{{- 'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' + (message.content or '') }}
{%- for tool_call in message.tool_calls or [] %}
{%- set call = tool_call.function if tool_call.function is defined else tool_call %}
{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": ' + (call.name | tojson) + ', "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# The same ChatML, rewriting history as Qwen3-class reasoning models do: an assistant turn before the
# last user message loses its `<think>...</think>`, so each new call's prompt stops extending the
# sequence the model sampled. Multi-turn tests of the history modes serve the tiny model with it.
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{%- for message in messages %}\n",
    "{%- set ns = namespace(last_user=-1) %}\n"
    "{%- for message in messages %}{%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}\n"
    "{%- for message in messages %}\n",
).replace(
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}",
    "{%- set content = message.content or '' %}\n"
    "{%- if loop.index0 < ns.last_user and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}\n"
    "{{- '<|im_start|>assistant\\n' + content }}",
)
CHAT_TEMPLATES = {"chatml": CHAT_TEMPLATE, "chatml-thinking": THINKING_CHAT_TEMPLATE}


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the generated model. The defaults give head_dim 64, the smallest vLLM's CPU
    attention backend accepts."""

    seed: int = 0
    """Seeds the weights only; the tokenizer is the same for every seed."""
    vocab_size: int = 1024
    """Tokenizer and embedding rows; the corpus fills exactly this many tokens."""
    hidden_size: int = 128
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    num_hidden_layers: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 4096
    tie_embeddings: bool = False
    """Share one matrix between the input embeddings and the output head, as most small open
    models do (Qwen2.5 0.5B-3B, Llama 3.2 1B/3B, Gemma); the checkpoint then holds no lm_head."""
    output_gain: float = 1.0
    chat_template: str = "chatml"
    """A key of CHAT_TEMPLATES: "chatml-thinking" strips earlier turns' reasoning, as Qwen3's template does."""
    """The final norm's gain, which scales every logit. At the untrained 1 the logits stay within
    about ±2.5 whatever the hidden state, so only the output head and this gain can sharpen the
    policy, and a LoRA adapter on the decoder's linear layers cannot; a trained model's gains
    and head make logits span tens (see docs/design/lora.md)."""

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.vocab_size < 256 + len(SPECIAL_TOKENS) + len(TOOL_CALL_TOKENS):
            raise ValueError("vocab_size must hold the 256 byte tokens plus the added tokens")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# Common English and math words; sentences drawn from them give BPE enough material for whole-word
# tokens, so the vocabulary is not wasted on fragments of a few templates.
WORDS = """
the a an and or but if then so because of to in on at by for with from into over under after
before about between is are was were be been has have had do does did can will would should must
may not no yes all each every some many few more most less least one two three four five six
seven eight nine ten hundred thousand number numbers digit digits sum difference product quotient
remainder total plus minus times divided equals equal add adds added subtract multiply divide
count counts solve solves solved answer answers question questions problem problems result step
steps first second third last next value values even odd greater smaller larger than half double
what which who how why when where this that these those it its he she they we you i my your our
their student teacher friend model agent user system assistant tool call function name arguments
expression calculator check checks write writes read reads explain explains think thinks know
knows find finds give gives take takes make makes use uses need needs want wants see sees say says
day days time year years apple apples book books box boxes coin coins cup cups bag bags train
trains car cars city school class group team game games point points price cost money dollar
dollars left right up down new old good bad small big long short fast slow true false correct
wrong please thank thanks hello world example simple easy hard final output input list table
"""
CHAT_ROLES = ["system", "user", "assistant", "tool"]


def tokenizer_corpus() -> list[str]:
    """Arithmetic questions and answers, word sentences and tool-call JSON, from a fixed seed."""
    rng = random.Random(CORPUS_SEED)
    words = WORDS.split()
    operations = [("+", "plus", "sum"), ("-", "minus", "difference"), ("*", "times", "product")]
    lines = []
    for _ in range(3000):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        symbol, word, noun = rng.choice(operations)
        result = {"+": a + b, "-": a - b, "*": a * b}[symbol]
        sentence = " ".join(rng.choices(words, k=rng.randint(4, 12)))
        lines += [
            f"What is {a} {symbol} {b}?",
            f"What is {a} {word} {b}? The answer is {result}.",
            f"Calculate the {noun} of {a} and {b}. {a} {symbol} {b} = {result}",
            sentence.capitalize() + rng.choice([".", "?", "!"]),
            f"{rng.choice(CHAT_ROLES)}\n{sentence}",
            json.dumps({"name": "calculator", "arguments": {"expression": f"{a} {symbol} {b}"}}),
        ]
    return lines


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer laid out like Qwen2's: merges first, then the added tokens."""
    tokenizer = Tokenizer(models.BPE())
    # transformers 5 loads any qwen2 checkpoint's tokenizer as Qwen2Tokenizer, which keeps our
    # vocabulary and merges but rebuilds normalizer and pre-tokenizer from Qwen2's defaults. Training
    # with exactly those keeps tokenizer.json and every transformers version in agreement.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    added_count = len(SPECIAL_TOKENS) + len(TOOL_CALL_TOKENS)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - added_count,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tokenizer_corpus(), trainer)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_CALL_TOKENS])
    if tokenizer.get_vocab_size() != vocab_size:
        # A smaller vocabulary would leave embedding rows with no token: a sampled id
        # that detokenizes to nothing.
        raise ValueError(
            f"the corpus supports {tokenizer.get_vocab_size()} tokens, not vocab_size={vocab_size}"
        )
    return tokenizer


def tokenizer_config(
    model_max_length: int, chat_template: str = CHAT_TEMPLATE
) -> dict[str, object]:
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": END_OF_TEXT,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    }


def build_model(spec: TinyModelSpec, eos_token_id: int, pad_token_id: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_embeddings,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        dtype="float32",
    )
    # fork_rng keeps the caller's global torch RNG untouched by our seeding.
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        # transformers wraps `to` in functools.wraps(torch.nn.Module.to), whose type keeps the unbound `self`.
        model = Qwen2ForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]
    if spec.output_gain != 1.0:
        with torch.no_grad():
            model.model.norm.weight.fill_(spec.output_gain)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_token_id, pad_token_id], pad_token_id=pad_token_id
    )
    return model


def generate_tiny_model(out_dir: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write a Qwen2ForCausalLM checkpoint, tokenizer and chat template into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = tokenizer_config(spec.max_position_embeddings, CHAT_TEMPLATES[spec.chat_template])
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    model = build_model(
        spec,
        eos_token_id=tokenizer.token_to_id(IM_END),
        pad_token_id=tokenizer.token_to_id(END_OF_TEXT),
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    (out_dir / TEST_MODEL_MARKER).write_text(
        json.dumps({"generated_by": "parity model generate", "seed": spec.seed}) + "\n"
    )
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="parity model generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model to")
    parser.add_argument("--seed", type=int, default=0, help="seed for the weights")
    parser.add_argument(
        "--tie-embeddings",
        action="store_true",
        help="one matrix for the input embeddings and the output head",
    )
    parser.add_argument(
        "--output-gain", type=float, default=1.0,
        help="the final norm's gain, which scales the logits (default 1); 8 gives a LoRA adapter room to learn",
    )  # fmt: skip
    parser.add_argument(
        "--chat-template", choices=sorted(CHAT_TEMPLATES), default="chatml",
        help="chatml-thinking drops <think>...</think> from assistant turns before the last user message",
    )  # fmt: skip
    args = parser.parse_args(argv)
    spec = TinyModelSpec(
        seed=args.seed,
        tie_embeddings=args.tie_embeddings,
        output_gain=args.output_gain,
        chat_template=args.chat_template,
    )
    print(generate_tiny_model(args.out, spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
