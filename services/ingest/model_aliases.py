"""Model aliases: the names black-box agents ask for (`claude-sonnet-4-5`, `gpt-5-codex`) mapped to a served model.

Rules are `PATTERN=MODEL`, where PATTERN is a shell-style glob matched against the
whole name and MODEL a model ingest serves (a policy replica's or an external one's),
or `@policy` for the model the policy replicas serve. The first rule that matches
wins; a name ingest serves itself is never aliased. The call records both names.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

POLICY = "@policy"
# What `parity up` and `parity train` give their ingests unless told otherwise: the names CLI
# agents ask for (Claude Code's claude-*, Codex's gpt-* and o-series, Gemini CLI's gemini-*)
# reach the policy, so such an agent trains unchanged.
VENDOR_MODEL_ALIASES = "claude-*=@policy,gpt-*=@policy,o[0-9]*=@policy,gemini-*=@policy"


@dataclass(frozen=True)
class AliasRule:
    pattern: str
    target: str
    matcher: re.Pattern[str]

    @classmethod
    def parse(cls, text: str) -> AliasRule:
        pattern, equals, target = text.partition("=")
        pattern, target = pattern.strip(), target.strip()
        if not equals or not pattern or not target:
            raise ValueError(
                f"a model alias is PATTERN=MODEL (e.g. 'claude-*=@policy'), got {text!r}"
            )
        if "," in target or "=" in target:
            raise ValueError(
                f"one model alias per rule: {text!r} holds several (give --model-alias once for each)"
            )
        return cls(pattern, target, re.compile(fnmatch.translate(pattern)))


def parse_rules(text: str) -> list[str]:
    """Comma-separated rules (`claude-*=@policy,gpt-*=@policy`), each checked; "" is none."""
    rules = [rule.strip() for rule in text.split(",") if rule.strip()]
    for rule in rules:
        AliasRule.parse(rule)
    return rules


class ModelAliases:
    def __init__(
        self, rules: Iterable[str], served: Callable[[], set[str]], policy: Callable[[], str | None]
    ) -> None:
        """`served`: the names ingest serves now; `policy`: the policy replicas' model, if one is up."""
        self.rules = [AliasRule.parse(rule) for rule in rules]
        self._served = served
        self._policy = policy

    def resolve(self, model: str) -> str:
        """The model that serves a request for `model`: itself unless a rule maps it."""
        if not self.rules or model in self._served():
            return model
        for rule in self.rules:
            if rule.matcher.fullmatch(model):
                if rule.target == POLICY:
                    return self._policy() or model
                return rule.target
        return model
