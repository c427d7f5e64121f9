"""The bridge between `parity train --env verifiers:PACKAGE` and an installed verifiers environment.

Parity runs it with `env_python`, the interpreter that has verifiers and the environment's package, since
verifiers' pins need not fit Parity's own environment. It imports no parity module.

    python bridge.py tasks '{"package": ..., "options": {...}, "size": 64, "val_size": 32}'
        prints {"train": [ROW, ...], "val": [ROW, ...]}: the taskset's first `size` tasks and the next
        `val_size`, each ROW {"id", "prompt", "verifiers": {"package", "index", "key"}}; or exits 2 with
        "FIELD: why" on stderr when the environment cannot run here.
    python bridge.py serve '{"package": ..., "options": {...}, "limit": 96, "stream": false, "require_tool": false}'
        serves rollouts as a Parity agent server: a JSON request a line on stdin (its task a ROW, with
        model, max_tokens and temperature; the rollout's openai_base_url), one reply a line on stdout,
        {"id", "reward"} with the trace's reward or {"id", "error"}.

Every rollout runs locally: the task's tool servers as local processes, the chat loop in this process
(parity_vf_harness), its model calls through verifiers' interception to the rollout's Parity session, with
the run's sampling settings. Retries inside verifiers stay off: a retried attempt would land in the same
session.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

# verifiers loads a harness by importing the module its id names: this folder holds parity_vf_harness.
sys.path.insert(0, str(Path(__file__).resolve().parent))

HARNESS = "parity_vf_harness"


class Refused(Exception):
    """The environment cannot run here; str() is "FIELD: why"."""


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("tasks", "serve"):
        print("usage: bridge.py tasks|serve JSON", file=sys.stderr)
        return 2
    request = json.loads(argv[2])
    try:
        if argv[1] == "tasks":
            print(json.dumps(_tasks(request)), flush=True)
        else:
            asyncio.run(_serve(request))
    except Refused as refusal:
        print(str(refusal), file=sys.stderr, flush=True)
        return 2
    return 0


def _tasks(request: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    env = _environment(request["package"], request["options"], stream=False)
    size, val_size = request["size"], request["val_size"]
    tasks = list(env.taskset.take(size + val_size))
    _refuse_remote(env, tasks)
    if len(tasks) < size + 1:
        raise Refused(
            f"env_size: {request['package']} has {len(tasks)} tasks; env_size takes at most {max(len(tasks) - 1, 0)} "
            "of them for training, leaving one for env_val_size"
        )
    rows = [_row(request["package"], index, task) for index, task in enumerate(tasks)]
    return {"train": rows[:size], "val": rows[size:]}


def _row(package: str, index: int, task: Any) -> dict[str, Any]:
    return {
        "id": f"{package}-{index}",
        "prompt": task.data.prompt_text,
        "verifiers": {"package": package, "index": index, "key": task.key},
    }


def _environment(
    package: str, options: dict[str, Any], stream: bool, require_tool: bool = False
) -> Any:
    try:
        import verifiers.v1 as vf
        from pydantic import ValidationError
    except ImportError as error:
        raise Refused(f"env_python: {sys.executable} cannot import verifiers ({error})") from None
    agent = {
        "harness": {"id": HARNESS, "stream": stream, "require_tool": require_tool},
        "runtime": {"type": "subprocess"},
        "retries": {"max_retries": 0},
    }
    raw = {"taskset": {**options, "id": package}, "agent": agent, "retries": {"max_retries": 0}}
    try:
        config = vf.resolve_env_config(raw)
    except ModuleNotFoundError:
        raise Refused(
            f"env: no verifiers environment {package!r} in {sys.executable}; installed: {_installed()}"
        ) from None
    except ValidationError as error:
        raise Refused(
            f"env_options: {package} refused them: {_validation_message(error)}"
        ) from None
    except (TypeError, AttributeError, ValueError) as error:
        raise Refused(f"env: {package} is not a verifiers environment: {error}") from None
    roles = [name for name, value in config if isinstance(value, vf.AgentConfig)]
    if roles != ["agent"]:
        raise Refused(
            f"env: {package} plays several agents ({', '.join(roles)}); Parity trains single-agent ones"
        )
    return vf.load_environment(config)


def _refuse_remote(env: Any, tasks: list[Any]) -> None:
    """Refuse what needs a container, a sandbox, a tunnel or a model elsewhere: none of it is local."""
    package = env.config.taskset.id
    task_type = type(env.taskset).task_type()
    if task_type.NEEDS_CONTAINER:
        raise Refused(
            f"env: {package}'s tasks need a container ({task_type.__name__}.NEEDS_CONTAINER)"
        )
    for task in tasks:
        if task.data.image:
            raise Refused(
                f"env: {package}'s task {task.data.idx} runs in the container image {task.data.image!r}"
            )
        if task.config.judges:
            raise Refused(
                f"env: {package} scores with a judge model, which is reached over the network"
            )
    servers = [
        *task_type.toolsets(env.taskset.config.task),
        *env.taskset.toolsets(env.taskset.config),
    ]
    for server in servers:
        url, runtime = getattr(server.config, "url", None), getattr(server.config, "runtime", None)
        name = type(server).__name__
        if url:
            raise Refused(f"env: {package}'s tool server {name} is remote ({url})")
        kind = getattr(runtime, "type", "subprocess")
        if kind != "subprocess":
            raise Refused(
                f"env: {package}'s tool server {name} runs in a {kind} runtime (a container or a sandbox); "
                "Parity runs tool servers as local processes (runtime type subprocess)"
            )


def _installed() -> str:
    """The installed distributions that depend on verifiers: its environments."""
    from importlib.metadata import distributions

    names = sorted(
        dist.metadata["Name"]
        for dist in distributions()
        if any(
            req.split(";")[0].strip().lower().startswith("verifiers")
            for req in (dist.requires or [])
        )
    )
    return ", ".join(names) or "none"


def _validation_message(error: Any) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc'][1:]) or 'taskset'}: {item['msg']}"
        for item in error.errors()
    )


async def _serve(request: dict[str, Any]) -> None:
    import verifiers.v1 as vf

    env = _environment(
        request["package"],
        request["options"],
        stream=request["stream"],
        require_tool=request["require_tool"],
    )
    tasks = list(env.taskset.take(request["limit"]))
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    async with env.serving():
        while (line := await lines.get()) is not None:
            if not line.strip():
                continue
            message = json.loads(line)
            reply: dict[str, Any]
            try:
                reply = {"reward": await _rollout(vf, env, tasks, message)}
            except Exception as error:  # noqa: BLE001 - a failed rollout is reported and the next one served
                reply = {"error": f"{type(error).__name__}: {error}"}
            print(json.dumps({"id": message["id"], **reply}), flush=True)


async def _rollout(vf: Any, env: Any, tasks: list[Any], message: dict[str, Any]) -> float:
    row = message["task"]
    reference = row.get("verifiers")
    if not isinstance(reference, dict):
        raise RuntimeError(
            f"task {row.get('id')!r} has no 'verifiers' key: an environment plays only its own tasks (val_tasks "
            "with env must be rows the run took from it)"
        )
    index = reference["index"]
    if index >= len(tasks) or tasks[index].key != reference["key"]:
        raise RuntimeError(
            f"task {row['id']} is not what {reference['package']} loads at {index} now: its taskset must load "
            "the same tasks every time"
        )
    context = vf.ModelContext(
        model=row["model"],
        client=vf.EvalClientConfig(
            base_url=message["openai_base_url"], api_key_var="OPENAI_API_KEY"
        ),
        sampling=vf.SamplingConfig(max_tokens=row["max_tokens"], temperature=row["temperature"]),
    )
    episode = await env.run_episode(tasks[index], context)
    failures = [*episode.errors, *(error for trace in episode.traces for error in trace.errors)]
    if failures or not episode.ok:
        raise RuntimeError(
            "; ".join(f"{error.type}: {error.message}" for error in failures)
            or "the episode failed"
        )
    return float(sum(trace.reward for trace in episode.traces))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
