"""When a group of rollouts has nothing to teach: every return the same."""

from __future__ import annotations

# Returns closer than this are equal: float32 token rewards round, and a group
# whose returns differ by less gives GRPO nothing to learn from.
_EQUAL_RETURNS = 1e-6


def has_no_variance(returns: list[float]) -> bool:
    """Two or more returns, all equal (the assembler drops such a group). A single rollout's variance is
    undefined, not zero."""
    return len(returns) >= 2 and max(returns) - min(returns) <= _EQUAL_RETURNS
