"""Turn boundaries derived from templates of four styles, and splices checked against the templates' own renders."""

from __future__ import annotations

import functools

import jinja2.sandbox
import pytest
from tokenizers import AddedToken, Tokenizer

from parity.services.inference.tiny_model import (
    CHAT_TEMPLATE,
    THINKING_CHAT_TEMPLATE,
    train_tokenizer,
)
from parity.services.ingest.history.turn_rules import (
    TemplateUnsupported,
    TurnRules,
    derive_turn_rules,
)

LLAMA3_TEMPLATE = """\
{{- '<|begin_of_text|>' }}
{%- for m in messages %}
{%- set role = 'ipython' if m.role == 'tool' else m.role %}
{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + (m.content or '') | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

# Gemma's way: no system role, the system prompt opens the first user turn.
FOLDED_SYSTEM_TEMPLATE = """\
{%- set ns = namespace(prefix='') %}
{%- set turns = messages %}
{%- if messages[0].role == 'system' %}{%- set ns.prefix = messages[0].content + '\\n\\n' %}{%- set turns = messages[1:] %}{%- endif %}
{{- '<bos>' }}
{%- for m in turns %}
{%- set role = 'model' if m.role == 'assistant' else 'user' %}
{{- '<start_of_turn>' + role + '\\n' + (ns.prefix if loop.first else '') + (m.content or '') + '<end_of_turn>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}
"""

STYLES = {
    # template, the token a reply stops on, the close the rules should find
    "chatml": (CHAT_TEMPLATE, "<|im_end|>", "<|im_end|>\n"),
    "chatml-thinking": (THINKING_CHAT_TEMPLATE, "<|im_end|>", "<|im_end|>\n"),
    "llama3": (LLAMA3_TEMPLATE, "<|eot_id|>", "<|eot_id|>"),
    "folded-system": (FOLDED_SYSTEM_TEMPLATE, "<end_of_turn>", "<end_of_turn>\n"),
}
EXTRA_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<bos>",
                 "<start_of_turn>", "<end_of_turn>"]  # fmt: skip


@functools.cache
def tokenizer() -> Tokenizer:
    tokenizer = train_tokenizer(1024)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in EXTRA_SPECIAL]
    )
    return tokenizer


class TemplateRenderer:
    """A chat template rendered as transformers renders one, then tokenized as vLLM's render does."""

    def __init__(self, template: str) -> None:
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True
        )
        self.template = environment.from_string(template)
        self.calls = 0

    def ids(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        text = self.template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, tools=None
        )
        return tokenizer().encode(text, add_special_tokens=False).ids

    async def __call__(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        self.calls += 1
        return self.ids(messages, add_generation_prompt)


def text(ids: list[int] | tuple[int, ...]) -> str:
    return tokenizer().decode(list(ids), skip_special_tokens=False)


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def assistant(content: str) -> dict:
    return {"role": "assistant", "content": content}


def tool(content: str) -> dict:
    return {"role": "tool", "content": content, "tool_call_id": "call-1"}


async def spliced(rules: TurnRules, render: TemplateRenderer, history: list[dict], sampled: list[int],
                  new: list[dict]) -> list[int]:  # fmt: skip
    """What exact_history sends for `new` after `history` and the reply sampled from it."""
    prompt = render.ids(history, True)
    tail = rules.tail(await render(TurnRules.stand_in() + new, True))
    assert tail is not None
    return rules.continue_after(prompt + sampled, tail)


@pytest.mark.parametrize("style", sorted(STYLES))
async def test_the_close_of_an_assistant_turn_is_derived_from_the_template(style: str) -> None:
    template, _, close = STYLES[style]
    rules = await derive_turn_rules(TemplateRenderer(template))
    assert text(rules.close_ids) == close
    assert text(rules.marker_ids).strip() == "Parity probe reply marker"


@pytest.mark.parametrize("style", ["chatml", "llama3", "folded-system"])
@pytest.mark.parametrize(
    "new", [[user("What is 3 plus 4?")], [tool("7")], [tool("7"), user("And 5 times 6?")]]
)
async def test_a_splice_is_what_the_template_renders_when_it_keeps_history(
    style: str, new: list[dict]
) -> None:
    template, stop, _ = STYLES[style]
    render = TemplateRenderer(template)
    rules = await derive_turn_rules(render)
    history = [{"role": "system", "content": "Answer in words."}, user("What is 2 plus 2?")]
    reply = "The answer is four."
    sampled = tokenizer().encode(reply, add_special_tokens=False).ids + [
        tokenizer().token_to_id(stop)
    ]
    expected = render.ids([*history, assistant(reply), *new], True)
    assert await spliced(rules, render, history, sampled, new) == expected


async def test_a_splice_keeps_the_reasoning_a_stripping_template_would_drop() -> None:
    stripping, keeping = TemplateRenderer(THINKING_CHAT_TEMPLATE), TemplateRenderer(CHAT_TEMPLATE)
    rules = await derive_turn_rules(stripping)
    history, new = [user("What is 2 plus 2?")], [user("And 3 plus 3?")]
    reply = "<think>two and two</think>four"
    sampled = tokenizer().encode(reply, add_special_tokens=False).ids + [
        tokenizer().token_to_id("<|im_end|>")
    ]
    result = await spliced(rules, stripping, history, sampled, new)
    assert result == keeping.ids([*history, assistant(reply), *new], True)
    assert result != stripping.ids([*history, assistant(reply), *new], True)
    assert "<think>two and two</think>" in text(result)


async def test_a_reply_cut_by_length_gets_the_close_the_model_never_sampled() -> None:
    render = TemplateRenderer(CHAT_TEMPLATE)
    rules = await derive_turn_rules(render)
    history, new = [user("What is 2 plus 2?")], [user("Go on.")]
    sampled = tokenizer().encode("The answer", add_special_tokens=False).ids
    assert await spliced(rules, render, history, sampled, new) == render.ids(
        [*history, assistant("The answer"), *new], True
    )


async def test_a_render_without_the_stand_in_reply_has_no_tail() -> None:
    render = TemplateRenderer(CHAT_TEMPLATE)
    rules = await derive_turn_rules(render)
    assert rules.tail(render.ids([user("Hello")], True)) is None


async def test_a_template_that_drops_assistant_content_is_refused() -> None:
    with pytest.raises(TemplateUnsupported, match="content"):
        await derive_turn_rules(
            TemplateRenderer("{%- for m in messages %}{{ m.role }}{% endfor %}")
        )
