"""A verifiers environment's tasks, and the agent that plays them: `parity train --env verifiers:PACKAGE`.

verifiers (0.4) pins what need not fit Parity's own environment (openai below 3), so the environment runs
in the interpreter that has it (`env_python`), behind verifiers_bridge/bridge.py: `environment_tasks` asks
it once, before anything starts, for the taskset's first `env_size` tasks and the `env_val_size` after
them (refusing an environment that needs a container, a sandbox, a tunnel or a judge model elsewhere);
`environment_agent` is an agent server running the same bridge, which plays each rollout with
`env.run_episode` and Parity's own harness against the rollout's session, and answers with the trace's
reward. Nothing here imports verifiers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from parity.training.agent_server import AgentServer
from parity.training.environment_settings import environment_package
from parity.training.settings import SettingsError, TrainSettings

BRIDGE = Path(__file__).with_name("verifiers_bridge") / "bridge.py"
TASK_KEY = "verifiers"
"""The task row's key holding where it came from: package, index and the task's content key."""
# Loading verifiers and a taskset imports a few hundred modules; a taskset that reads a dataset may take longer.
LOAD_TIMEOUT_S = 600.0
_BAD_INPUT = 2


def environment_tasks(settings: TrainSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training tasks and the held-out ones of `settings.env`. Raises SettingsError naming the setting
    when the package is not installed, refuses its options, or cannot run here."""
    request = _request(settings) | {"size": settings.env_size, "val_size": settings.env_val_size}
    argv = [_python(settings), str(BRIDGE), "tasks", json.dumps(request)]
    try:
        finished = subprocess.run(argv, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SettingsError(
            "env", f"{settings.env} did not load its tasks in {LOAD_TIMEOUT_S:.0f} s"
        ) from None
    if finished.returncode == _BAD_INPUT and ": " in (
        refusal := finished.stderr.strip().splitlines()[-1] if finished.stderr.strip() else ""
    ):
        field, why = refusal.split(": ", 1)
        raise SettingsError(field, why)
    if finished.returncode != 0:
        tail = (finished.stderr or finished.stdout).strip()[-2000:]
        raise SettingsError(
            "env", f"{settings.env} failed to load (exit {finished.returncode}): {tail}"
        )
    loaded = json.loads(finished.stdout.strip().splitlines()[-1])
    return loaded["train"], loaded["val"]


def environment_agent(settings: TrainSettings) -> AgentServer:
    """The agent that plays `settings.env`'s tasks: the bridge as an agent server, one process per rollout
    running at once, each loading the environment once."""
    request = _request(settings) | {
        "limit": settings.env_size + settings.env_val_size,
        "stream": settings.env_stream,
        "require_tool": settings.env_require_tool,
    }
    argv = [_python(settings), str(BRIDGE), "serve", json.dumps(request)]
    return AgentServer(argv, name=f"verifiers environment {environment_package(settings.env)}")


def _request(settings: TrainSettings) -> dict[str, Any]:
    return {"package": environment_package(settings.env), "options": settings.env_options or {}}


def _python(settings: TrainSettings) -> str:
    """The interpreter to run the bridge with: a path (relative to where the run starts), or a name on PATH."""
    given = settings.env_python
    if not given:
        return sys.executable
    found = shutil.which(given) if os.sep not in given else given
    python = Path(found or given).expanduser()
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise SettingsError(
            "env_python", f"{given} is not an executable file (nor a program on PATH)"
        )
    return str(python.absolute())
