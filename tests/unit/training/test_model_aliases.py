"""Model aliases from the front door: `parity train` (flag, TOML key, keyword) and `parity up` pass them to
ingest, and their default serves CLI agents' vendor model names with the policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.services.ingest.model_aliases import (
    VENDOR_MODEL_ALIASES,
    AliasRule,
    ModelAliases,
    parse_rules,
)
from parity.services.stack.up import build_parser
from parity.training.config_file import ConfigError, build_settings, load_file
from parity.training.local_stack import LocalStack
from parity.training.settings import SettingsError, TrainSettings


@pytest.mark.parametrize(
    "name",
    ["claude-sonnet-4-5", "claude-haiku-4-5-20251001", "gpt-5-codex", "o4-mini", "gemini-2.5-pro"],
)
def test_the_default_serves_cli_agents_vendor_names_with_the_policy(name: str) -> None:
    aliases = ModelAliases(
        parse_rules(VENDOR_MODEL_ALIASES), served=lambda: {"policy"}, policy=lambda: "policy"
    )
    assert aliases.resolve(name) == "policy"
    assert (
        aliases.resolve("policy") == "policy" and aliases.resolve("my-own-model") == "my-own-model"
    )


def test_train_settings_take_aliases_as_keyword_file_key_and_flag(tmp_path: Path) -> None:
    assert TrainSettings().model_aliases == VENDOR_MODEL_ALIASES
    assert TrainSettings(model_aliases="").model_aliases == ""
    path = tmp_path / "train.toml"
    path.write_text(
        'agent_command = "true"\nmodel_aliases = "claude-*=@policy"\nmax_model_len = 65536\n'
    )
    values, sources = load_file(path)
    settings = build_settings(values, {}, sources)
    assert (settings.model_aliases, settings.max_model_len) == ("claude-*=@policy", 65536)
    stack = LocalStack.for_run(tmp_path / "stack", settings, tmp_path / "model")
    command = stack.command()
    assert command[command.index("--model-aliases") + 1] == "claude-*=@policy"
    assert command[command.index("--max-model-len") + 1] == "65536"


def test_a_rule_without_a_target_is_refused_naming_where_it_was_set(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match=r"model_aliases: a model alias is PATTERN=MODEL .*got 'claude-\*'"
    ):
        TrainSettings(model_aliases="claude-*")
    path = tmp_path / "train.toml"
    path.write_text('agent_command = "true"\n\nmodel_aliases = "gpt-*=@policy,claude-*"\n')
    values, sources = load_file(path)
    with pytest.raises(
        ConfigError, match=r"train\.toml:3: model_aliases: a model alias is PATTERN=MODEL"
    ):
        build_settings(values, {}, sources)
    with pytest.raises(SettingsError, match="max_model_len: must be at least 1"):
        TrainSettings(max_model_len=0)


def test_parity_up_takes_aliases_and_refuses_a_bad_one(capsys) -> None:
    parser = build_parser()
    assert parser.parse_args([]).model_aliases == parse_rules(VENDOR_MODEL_ALIASES)
    assert parser.parse_args(["--model-aliases", ""]).model_aliases == []
    assert parser.parse_args(["--model-aliases", "a*=b, c=@policy"]).model_aliases == [
        "a*=b",
        "c=@policy",
    ]
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-aliases", "claude-*"])
    assert "argument --model-aliases: a model alias is PATTERN=MODEL" in capsys.readouterr().err


def test_several_rules_in_one_ingest_flag_are_refused_not_read_as_one_target() -> None:
    # `--model-alias 'claude-*=@policy,gpt-*=@policy'` once would otherwise send claude-* to a model named
    # '@policy,gpt-*=@policy', and every call for either to a 404.
    with pytest.raises(
        ValueError, match=r"one model alias per rule: .* \(give --model-alias once for each\)"
    ):
        AliasRule.parse("claude-*=@policy,gpt-*=@policy")
    assert AliasRule.parse("claude-*=@policy").target == "@policy"
