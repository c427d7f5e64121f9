"""No hand-written module passes 450 lines: a module that long holds several concerns, each of which a newcomer
should find by its own name. Generated code (sdk/parity/api, sdk/parity/clients/generated) is not written by hand;
only files git tracks count, so no virtualenv or build folder does."""

import subprocess

from tests.conftest import REPO_ROOT

MAX_LINES = 450
TREES = ["sdk", "services", "bench", "scripts", "examples", "tests"]
GENERATED = ("sdk/parity/api/", "sdk/parity/clients/generated/")


def hand_written_modules() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *TREES],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    # A tracked file deleted from the working tree has no lines to count.
    return [
        path
        for path in listed
        if path.endswith(".py") and not path.startswith(GENERATED) and (REPO_ROOT / path).is_file()
    ]


def test_the_walk_finds_the_hand_written_trees_and_skips_the_generated_code() -> None:
    modules = set(hand_written_modules())
    assert {
        "sdk/parity/cli.py",
        "services/stack/up.py",
        "bench/ingest.py",
        "tests/conftest.py",
    } <= modules
    assert not any(path.startswith(GENERATED) for path in modules)


def test_no_hand_written_module_passes_450_lines() -> None:
    lines = {
        path: len((REPO_ROOT / path).read_text(encoding="utf-8").splitlines())
        for path in hand_written_modules()
    }
    over = sorted((count, path) for path, count in lines.items() if count > MAX_LINES)
    assert not over, (
        f"{len(over)} modules over {MAX_LINES} lines; split each by concern:\n"
        + "\n".join(f"  {path}: {count}" for count, path in reversed(over))
    )
