"""`parity train`'s settings: the TOML file, the flags over it, and errors that say where."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.training.cli import build_parser, main
from parity.training.config_file import (
    ConfigError,
    SettingsSources,
    build_settings,
    key_line,
    load_file,
)
from parity.training.settings import SettingsError, StackAddresses, TrainSettings, settings_fields

# main() configures structlog for its process, onto the stderr pytest captures: put the defaults back after.
pytestmark = pytest.mark.usefixtures("restore_logging")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(text)
    return path


def test_a_file_and_flags_make_one_settings_object_with_flags_winning(tmp_path) -> None:
    path = write(
        tmp_path,
        'agent = "pkg.mod:fn"\ntasks = "data/tasks.jsonl"\nsteps = 12\nlearning-rate = 1e-5\n',
    )
    values, sources = load_file(path)
    settings = build_settings(values, {"steps": 40}, sources)
    assert (
        settings.steps == 40 and settings.learning_rate == 1e-5 and settings.agent == "pkg.mod:fn"
    )
    # Input paths in a file are relative to the file, not to where the command runs.
    assert settings.tasks == str((tmp_path / "data" / "tasks.jsonl").resolve())


def test_an_unknown_key_names_the_file_line_and_a_close_match(tmp_path) -> None:
    path = write(tmp_path, 'agent = "pkg.mod:fn"\n\nlerning_rate = 0.1\n')
    with pytest.raises(
        ConfigError,
        match=r"train\.toml:3: lerning_rate: unknown key \(did you mean 'learning_rate'\?\)",
    ):
        load_file(path)


def test_a_renamed_key_says_its_new_name(tmp_path) -> None:
    path = write(tmp_path, 'mode = "async"\n')
    with pytest.raises(ConfigError, match=r"train\.toml:1: mode: renamed 'rollout_mode'"):
        load_file(path)


def test_a_wrong_type_names_the_file_line_and_key(tmp_path) -> None:
    path = write(tmp_path, 'agent = "pkg.mod:fn"\nsteps = "ten"\n')
    with pytest.raises(
        ConfigError, match=r"train\.toml:2: steps: must be an integer, got 'ten' \(string\)"
    ):
        load_file(path)


def test_an_out_of_range_value_from_the_file_names_its_line(tmp_path) -> None:
    path = write(tmp_path, 'agent = "pkg.mod:fn"\ntemperature = 0.5\nrollouts_per_task = 0\n')
    values, sources = load_file(path)
    with pytest.raises(
        ConfigError, match=r"train\.toml:3: rollouts_per_task: must be at least 1, got 0"
    ):
        build_settings(values, {}, sources)


def test_an_out_of_range_flag_names_the_flag(tmp_path) -> None:
    values, sources = load_file(write(tmp_path, 'agent = "pkg.mod:fn"\n'))
    with pytest.raises(ConfigError, match=r"^--learning-rate: must be greater than 0"):
        build_settings(values, {"learning_rate": -1.0}, sources)


def test_invalid_toml_is_refused_with_its_position(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"train\.toml: not valid TOML: .*line 2"):
        load_file(write(tmp_path, 'agent = "pkg.mod:fn"\nsteps = = 3\n'))


def test_the_stack_table_is_checked_key_by_key(tmp_path) -> None:
    good = write(
        tmp_path, '[stack]\ningest = "http://h:8000"\nassembler = "h:50053"\ntrainer = "h:50054"\n'
    )
    assert load_file(good)[0]["stack"] == StackAddresses("http://h:8000", "h:50053", "h:50054")
    bad = write(tmp_path, '[stack]\ningest_url = "http://h:8000"\nasembler = "h:50053"\n')
    with pytest.raises(
        ConfigError,
        match=r"train\.toml:3: stack\.asembler: unknown key \(did you mean 'assembler'\?\)",
    ):
        load_file(bad)
    missing = write(tmp_path, '[stack]\ningest_url = "http://h:8000"\n')
    with pytest.raises(ConfigError, match=r"stack\.assembler: is required"):
        load_file(missing)


def test_stack_flag_parses_name_address_pairs() -> None:
    stack = StackAddresses.parse("ingest=http://a:8000, assembler=a:1,trainer=a:2,store=a:3")
    assert stack == StackAddresses("http://a:8000", "a:1", "a:2", "a:3")
    with pytest.raises(SettingsError, match="NAME=ADDRESS"):
        StackAddresses.parse("ingest=http://a:8000,gpu=a:1")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--stack", "trainer"])


def test_settings_refuse_contradictions_and_bad_names() -> None:
    with pytest.raises(SettingsError, match="set steps or epochs, not both"):
        TrainSettings(steps=3, epochs=1.0)
    with pytest.raises(SettingsError, match="not agent and agent_command$"):
        TrainSettings(agent="a.b:c", agent_command="node agent.js")
    with pytest.raises(
        SettingsError, match="^agent_command: .* not agent_command and agent_server$"
    ):
        TrainSettings(agent_command="node agent.js", agent_server="node server.js")
    with pytest.raises(SettingsError, match="pkg.module:function"):
        TrainSettings(agent="a.b.c")
    with pytest.raises(SettingsError, match="must be one of auto, cpu, fsdp"):
        TrainSettings(backend="tpu")
    with pytest.raises(SettingsError, match="reward: scores an agent_command"):
        TrainSettings(agent="a.b:c", reward="a.b:score")
    with pytest.raises(SettingsError, match="must be an integer"):
        TrainSettings(steps=2.5)  # type: ignore[arg-type]


def test_epochs_set_the_step_count() -> None:
    assert TrainSettings(groups_per_batch=4).total_steps(10) == 3
    assert TrainSettings(groups_per_batch=4, epochs=2.0).total_steps(10) == 5
    assert TrainSettings(steps=7).total_steps(10) == 7


def test_every_setting_is_a_flag_of_the_same_name() -> None:
    options = {option for action in build_parser()._actions for option in action.option_strings}
    for field in settings_fields():
        assert "--" + field.name.replace("_", "-") in options
        assert field.metadata["help"], f"{field.name} has no help text"


def test_settings_round_trip_through_json() -> None:
    settings = TrainSettings(
        agent="a.b:c", steps=3, stack=StackAddresses("http://h:1", "h:2", "h:3")
    )
    assert TrainSettings.from_json(settings.to_json()) == settings


def test_key_line_finds_keys_in_their_table() -> None:
    text = 'steps = 1\n[stack]\ntrainer = "x"\n'
    assert key_line(text, "", "steps") == 1
    assert key_line(text, "stack", "trainer") == 3
    assert key_line(text, "", "trainer") is None


def test_the_cli_refuses_bad_input_before_starting_anything(tmp_path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "q": 1}\n{"q": 2}\n')
    code = main(
        ["--agent", "json:dumps", "--tasks", str(tasks), "--output-dir", str(tmp_path / "runs")]
    )
    assert code == 2
    assert (
        f"{tasks}:2: every task needs a non-empty string or integer 'id'" in capsys.readouterr().err
    )
    assert not (tmp_path / "runs").exists()


def test_the_cli_names_an_agent_that_cannot_be_imported(tmp_path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a"}\n')
    assert main(["--agent", "no_such_module_here:solve", "--tasks", str(tasks)]) == 2
    assert (
        "agent 'no_such_module_here:solve': cannot import 'no_such_module_here'"
        in capsys.readouterr().err
    )


def test_the_cli_names_a_command_that_is_not_found(tmp_path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a"}\n')
    assert main(["--agent-command", "no-such-agent-binary --fast", "--tasks", str(tasks)]) == 2
    assert "'no-such-agent-binary' is not found on PATH" in capsys.readouterr().err


def test_a_config_error_from_the_cli_names_the_file_line(tmp_path, capsys) -> None:
    path = write(tmp_path, 'agent = "json:dumps"\ntasks = "tasks.jsonl"\nsteps = 0\n')
    (tmp_path / "tasks.jsonl").write_text('{"id": "a"}\n')
    assert main(["--config", str(path)]) == 2
    assert f"{path}:3: steps: must be at least 1, got 0" in capsys.readouterr().err


def test_sources_point_at_the_flag_when_a_flag_set_the_key(tmp_path) -> None:
    sources = SettingsSources(file=tmp_path / "t.toml", file_text="steps = 1\n", flags={"steps"})
    assert sources.where("steps") == "--steps"
    sources.flags = set()
    assert sources.where("steps") == f"{tmp_path / 't.toml'}:1: steps"


def test_a_model_name_in_a_file_stays_a_name_and_a_model_folder_is_relative_to_the_file(
    tmp_path,
) -> None:
    named = write(tmp_path, 'agent = "pkg.mod:fn"\ntasks = "t.jsonl"\nmodel = "tiny-test"\n')
    assert load_file(named)[0]["model"] == "tiny-test"
    folder = write(tmp_path, 'agent = "pkg.mod:fn"\ntasks = "t.jsonl"\nmodel = "models/mine"\n')
    assert load_file(folder)[0]["model"] == str((tmp_path / "models" / "mine").resolve())


@pytest.mark.parametrize("example", ["calculator", "math"])
def test_a_distillation_example_needs_its_teacher_and_says_so(example: str) -> None:
    path = Path(__file__).parents[3] / "examples" / example / "distill.toml"
    values, sources = load_file(path)
    settings = build_settings(values, {"teacher": "runs/demo/model"}, sources)
    assert (settings.teacher, settings.reward_coef, settings.teacher_coef) == (
        "runs/demo/model",
        0.0,
        1.0,
    )
    with pytest.raises((SettingsError, ConfigError), match="set teacher"):
        build_settings(values, {}, sources)
