"""The front page is true to the code: each `parity` command the user docs show exists, names itself in its
usage line and takes the flags shown; each `parity.NAME` they show is importable; the README's address and
key file are what `parity up` uses, and the SDK's defaults point there. (tests/integration/
test_readme_snippets.py runs the README's Python against a real `parity up`.)"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

import parity
from parity import cli
from parity.config import ParityConfig
from parity.services.inference.model_command import build_parser as model_parser
from parity.services.stack.up import build_parser as up_parser

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_DOCS = [
    ROOT / "README.md",
    *(ROOT / "docs" / name for name in ("training.md", "production.md", "sdk.md")),
]


def _choices(parser: object) -> list[str]:
    return [name for action in parser._subparsers._group_actions for name in action.choices]  # type: ignore[attr-defined]


COMMANDS = {
    *((service, "serve") for service in cli.SERVICE_MODULES),
    *cli.DELEGATED_COMMANDS,
    *(("model", action) for action in _choices(model_parser())),
}


def help_of(words: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        cli.main([*words, "--help"])
    assert exited.value.code == 0, words
    return out.getvalue()


def documented_commands() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(command as written, command words, flags) for each `parity ...` in a shell block or in inline code."""
    found = set()
    for doc in COMMAND_DOCS:
        text = doc.read_text()
        blocks = re.findall(
            r"^```(?:sh|console|bash)\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL
        )
        lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        lines += re.findall(r"`(parity [^`]+)`", text)
        for line in lines:
            command = " ".join(re.sub(r"^(\$ |\.venv/bin/)", "", line.strip()).split())
            if not command.startswith("parity "):
                continue
            # What follows a comment, a pipe or the next command is not this command's.
            command = re.split(r"\s(?:#|\||&&|;)\s?", command)[0]
            for service in cli.SERVICE_MODULES if "<service>" in command else [""]:
                written = command.replace("<service>", service)
                try:
                    tokens = shlex.split(written)[1:]
                except ValueError:  # an unbalanced quote in prose
                    tokens = written.split()[1:]
                words = next(
                    (tuple(tokens[:n]) for n in (2, 1) if tuple(tokens[:n]) in COMMANDS),
                    tuple(tokens[:2]),
                )
                flags = tuple(
                    re.sub(r"[=\]].*", "", token.lstrip("["))
                    for token in tokens
                    if token.lstrip("[").startswith("--")
                )
                found.add((f"{doc.name}: {written}", words, flags))
    return sorted(found)


DOCUMENTED = documented_commands()


@pytest.mark.parametrize(
    ("where", "words", "flags"), DOCUMENTED, ids=[where for where, _, _ in DOCUMENTED]
)
def test_each_documented_command_exists_and_takes_the_flags_shown(where: str, words: tuple[str, ...],
                                                                   flags: tuple[str, ...]) -> None:  # fmt: skip
    assert words in COMMANDS, f"{where}: no command `parity {' '.join(words)}`"
    text = help_of(words)
    assert text.startswith(f"usage: parity {' '.join(words)} "), text.splitlines()[0]
    missing = [flag for flag in flags if not re.search(rf"{re.escape(flag)}(?![\w-])", text)]
    assert not missing, f"{where}: `parity {' '.join(words)} --help` has no {missing}"


def test_each_command_names_itself_and_each_group_lists_its_actions() -> None:
    for words in sorted(COMMANDS):
        assert help_of(words).startswith(f"usage: parity {' '.join(words)} "), words
    for group in sorted({words[0] for words in COMMANDS if len(words) == 2}):
        listed = help_of((group,))
        for words in COMMANDS:
            if words[:1] == (group,) and len(words) == 2:
                assert words[1] in listed, f"`parity {group} --help` does not list {words[1]}"


def _metadata_keys() -> set[str]:
    """The `parity.*` keys the services write into sessions' and trajectories' metadata (parity.filtered, ...)."""
    keys = set()
    for source in [*(ROOT / "sdk").rglob("*.py"), *(ROOT / "services").rglob("*.py")]:
        keys |= set(re.findall(r"[\"'](parity\.[a-z_]+)[\"']", source.read_text()))
    return keys


def test_each_parity_name_in_the_docs_is_importable() -> None:
    keys = _metadata_keys()
    unknown = []
    for doc in USER_DOCS:
        for name in set(re.findall(r"(?<![\w.])parity\.([A-Za-z_]\w*)\b(?!\.)", doc.read_text())):
            if f"parity.{name}" in keys or importlib.util.find_spec(f"parity.{name}") is not None:
                continue
            if name not in parity.__all__ or not hasattr(parity, name):
                unknown.append(f"{doc.name}: parity.{name}")
    assert not unknown, unknown


def test_the_packages_exports_all_resolve() -> None:
    assert sorted(parity.__all__) == sorted(parity._EXPORTS)
    for name in parity.__all__:
        assert getattr(parity, name) is not None, name


def test_the_readme_uses_what_parity_up_prints_and_the_sdk_defaults_to_it() -> None:
    defaults = up_parser().parse_args([])
    agents = f"http://{defaults.host}:{defaults.http_port}"
    readme = (ROOT / "README.md").read_text()
    assert f"`agents {agents}/v1`" in readme
    assert f"`{defaults.data_dir}/tokens/agent.token`" in readme
    assert f'base_url="{agents}/sessions/' in readme
    # What tests/integration/test_readme_snippets.py runs: the agent function, the OpenAI client, the SDK.
    assert len(re.findall(r"^```python$", readme, flags=re.MULTILINE)) >= 3
    sdk = ParityConfig()
    assert (sdk.ingest_url, sdk.assembler_address, sdk.store_address) == (
        agents, f"{defaults.host}:{defaults.assembler_port}", f"{defaults.host}:{defaults.store_port}"
    )  # fmt: skip
