"""`--env verifiers:PACKAGE` and its settings, checked before anything starts (the environment itself is loaded
by tests/integration/training/test_verifiers_environment.py, in the interpreter that has verifiers)."""

from __future__ import annotations

import pytest

from parity.training.cli import build_parser, main
from parity.training.config_file import load_file
from parity.training.run_inputs import keep_given_tasks
from parity.training.settings import SettingsError, TrainSettings
from parity.training.verifiers_environment import environment_agent

pytestmark = pytest.mark.usefixtures("restore_logging")

SUMS = "verifiers:parity-vf-sums"


@pytest.mark.parametrize(
    ("values", "key", "message"),
    [
        ({"env": "parity-vf-sums"}, "env", "must be verifiers:PACKAGE"),
        ({"env": "verifiers:"}, "env", "must be verifiers:PACKAGE"),
        ({"env": SUMS, "tasks": "tasks.jsonl"}, "tasks", "brings its own tasks"),
        ({"env": SUMS, "agent": "my.agent:run"}, "agent", "played by Parity's harness"),
        (
            {"env": SUMS, "agent_server": "python a.py"},
            "agent_server",
            "played by Parity's harness",
        ),
        ({"env_options": {"num_tasks": 3}}, "env_options", "needs env = verifiers:PACKAGE"),
        ({"env_python": "python3"}, "env_python", "needs env = verifiers:PACKAGE"),
        ({"env": SUMS, "env_size": 0}, "env_size", "at least 1"),
        ({"env": SUMS, "env_val_size": -1}, "env_val_size", "at least 0"),
        ({"env": SUMS, "env_options": "num_tasks"}, "env_options", "expected KEY=VALUE pairs"),
    ],
)
def test_environment_settings_are_checked_naming_the_setting(values, key, message) -> None:
    with pytest.raises(SettingsError, match=message) as refused:
        TrainSettings(**values)
    assert refused.value.key == key


def test_options_come_as_flags_toml_tables_and_keywords(tmp_path) -> None:
    flags = build_parser().parse_args(
        ["--env", SUMS, "--env-options", "num_tasks=20,max_operand=5"]
    )
    assert (flags.env, flags.env_options) == (SUMS, {"num_tasks": 20, "max_operand": 5})
    config = tmp_path / "train.toml"
    config.write_text(f'env = "{SUMS}"\nenv-size = 8\n[env_options]\nnum_tasks = 20\n')
    values, _ = load_file(config)
    assert values == {"env": SUMS, "env_size": 8, "env_options": {"num_tasks": 20}}
    given = TrainSettings(env=SUMS, env_options="num_tasks=20")  # type: ignore[arg-type]
    assert given.env_options == {"num_tasks": 20}


def test_a_malformed_options_flag_is_refused_as_its_own_flag(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--env", SUMS, "--env-options", "num_tasks"])
    assert "--env-options: expected KEY=VALUE pairs, got 'num_tasks'" in capsys.readouterr().err


def test_an_interpreter_that_is_not_there_is_refused_before_anything_starts(
    tmp_path, capsys
) -> None:
    runs = tmp_path / "runs"
    code = main(
        ["--env", SUMS, "--env-python", str(tmp_path / "no-python"), "--output-dir", str(runs)]
    )
    assert code == 2
    assert "--env-python: " in capsys.readouterr().err
    assert not runs.exists()
    with pytest.raises(SettingsError, match="not an executable file"):
        environment_agent(TrainSettings(env=SUMS, env_python="no-such-python-here"))


def test_an_environments_training_tasks_are_loaded_again_on_resume_and_its_held_out_ones_kept(
    tmp_path,
) -> None:
    settings = TrainSettings(env=SUMS)
    kept = keep_given_tasks(settings, tmp_path, [{"id": "t0"}], [{"id": "v0"}])
    assert kept.tasks == ""
    assert kept.val_tasks == str(tmp_path / "val_tasks.jsonl")
