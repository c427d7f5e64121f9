"""The main job's calculator tool: what the policy may ask and what it gets back."""

import pytest

from examples.calculator.agent import CALCULATOR_CALL, calculate, final_number


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("37 * 48", "Result: 1776"),
        ("37 x 48", "Result: 1776"),
        ("(12 + 3) * 2", "Result: 30"),
        ("7 / 2", "Result: 3.5"),
    ],
)
def test_arithmetic_is_answered(expression, answer) -> None:
    assert calculate(expression) == answer


@pytest.mark.parametrize("expression", ["9**9**9", "1" * 41, "abc", "1 / 0", "12 (3)", "()", ""])
def test_anything_else_is_an_error_the_policy_reads_at_once(expression) -> None:
    assert calculate(expression) == "Error: not an expression"


def test_a_call_is_found_in_a_reply_and_the_answer_is_its_last_number() -> None:
    call = CALCULATOR_CALL.search("Let me see. CALC 28 * 83 please")
    assert call is not None and call.group(1).strip() == "28 * 83"
    assert final_number("The answer is 2,324.") == 2324
    assert final_number("no digits") is None
