"""The main job's agent: word problems solved with a calculator tool, over several turns.

    parity train --config examples/calculator/train.toml      # what `make demo` runs

The policy is told it has a calculator and shown one exchange. Each turn it either
asks the calculator (`CALC 37 * 48`), and the agent answers with the result in the
next user turn, or it answers. The reward is verifiable: 1 when the last number of
the final answer is the task's answer, else 0. A 135M model cannot multiply two-digit
numbers in its head, so it scores only by calling the calculator with the right
expression and then reporting the result; untrained it does so about a fifth of the
time, depending on how the question is worded.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

import parity

MAX_CALLS = 3
MAX_EXPRESSION = 40
SYSTEM = "You can use a calculator. To use it, reply CALC followed by the expression."
EXAMPLE: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is 12 * 7?"},
    {"role": "assistant", "content": "CALC 12 * 7"},
    {"role": "user", "content": "Result: 84"},
    {"role": "assistant", "content": "84"},
]
CALCULATOR_CALL = re.compile(r"CALC\s*([\d\s+*x×/()-]+)")
ARITHMETIC = re.compile(r"[\d\s+*/()-]+")
NUMBER = re.compile(r"-?\d+")


def calculate(expression: str) -> str:
    """The tool: integer arithmetic with + - * / and parentheses, or an error the policy reads."""
    expression = expression.replace("x", "*").replace("×", "*").strip()
    # No powers and nothing long: a sampled "9**9**9" must not stall the rollout computing it.
    if (
        not ARITHMETIC.fullmatch(expression)
        or "**" in expression
        or len(expression) > MAX_EXPRESSION
    ):
        return "Error: not an expression"
    if not any(c.isdigit() for c in expression):
        return "Error: not an expression"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", SyntaxWarning
            )  # "12 (3)" reads as a call: an error for the policy, not a log line
            value = eval(
                expression, {"__builtins__": {}}, {}
            )  # only digits, spaces, + - * / ( ) reach here
    except (SyntaxError, ZeroDivisionError, TypeError):
        return "Error: not an expression"
    return f"Result: {value:g}" if isinstance(value, float) else f"Result: {value}"


def final_number(text: str) -> int | None:
    numbers = NUMBER.findall(text.replace(",", ""))
    return int(numbers[-1]) if numbers else None


async def solve(task: dict[str, Any]) -> float:
    client = parity.get_async_chat_client()
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        *EXAMPLE,
        {"role": "user", "content": task["question"]},
    ]
    for _ in range(MAX_CALLS):
        reply = await client.chat.completions.create(
            model=task["model"], messages=messages, max_tokens=task["max_tokens"], temperature=task["temperature"],
        )  # fmt: skip
        text = reply.choices[0].message.content or ""
        call = CALCULATOR_CALL.search(text)
        if call is None:
            return 1.0 if final_number(text) == int(task["answer"]) else 0.0
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": calculate(call.group(1))},
        ]
    return 0.0
