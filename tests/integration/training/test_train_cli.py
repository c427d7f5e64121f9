"""`parity train` as a user runs it: a TOML file, an agent written in Node.js, the local stack it brings up
itself, Ctrl-C or SIGTERM in the middle, and `--resume` to finish the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

# An agent in another language: one chat call through its session's base URL, its reward on stdout. Given
# HOLD_METRICS and HOLD_DIR (the test's, not Parity's), a rollout that starts once the run has recorded two training
# steps marks itself held in HOLD_DIR and waits until it is killed: the run can finish no step that needs it.
NODE_AGENT = """
import { existsSync, readFileSync, writeFileSync } from "node:fs";
const task = JSON.parse(process.env.PARITY_TASK);
if (JSON.parse(readFileSync(0, "utf8")).id !== task.id) process.exit(3);  // the task comes on stdin too
const { HOLD_METRICS, HOLD_DIR } = process.env;
const trained = (path) => !existsSync(path) ? 0 : readFileSync(path, "utf8").split("\\n").filter((line) => {
  try { return JSON.parse(line).kind === "train"; } catch { return false; }  // a line still being written
}).length;
if (HOLD_DIR && trained(HOLD_METRICS) >= 2) {
  writeFileSync(`${HOLD_DIR}/held-${process.pid}`, "");
  setInterval(() => {}, 60_000);
  await new Promise(() => {});
}
const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json", authorization: `Bearer ${process.env.OPENAI_API_KEY}` },
  body: JSON.stringify({ model: task.model, messages: [{ role: "user", content: task.prompt }],
                         max_tokens: task.max_tokens, temperature: task.temperature, logprobs: true }),
});
const tokens = (await response.json()).choices[0].logprobs.content.map((entry) => entry.token);
console.log(`said ${tokens.length} tokens`);
console.log(JSON.stringify({ reward: tokens.filter((t) => t.startsWith(" ")).length / Math.max(1, tokens.length) }));
"""
CONFIG = """
agent_command = "node {agent}"
tasks = "tasks.jsonl"
model = "tiny-test"
steps = 5
groups_per_batch = 2
rollouts_per_task = 4
max_tokens = 8
learning_rate = 3e-3
checkpoint_interval = 1
"""


def parity_train(
    *args: str, stderr: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    with stderr.open("a") as log:
        # Ctrl-C as a terminal sends it, even when the tests run as a background job (which starts with SIGINT
        # ignored, a disposition children inherit).
        return subprocess.Popen([sys.executable, "-m", "parity.cli", "train", "--no-progress", *args],
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, env=os.environ | (env or {}),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


def train_steps(metrics: Path) -> list[int]:
    if not metrics.exists():
        return []
    return [
        r["step"] for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == "train"
    ]


def test_a_node_agent_trains_from_a_toml_file_stops_on_ctrl_c_and_resumes(tmp_path) -> None:
    (tmp_path / "agent.mjs").write_text(NODE_AGENT)
    prompts = [
        "Tell me about your day.",
        "Describe the sea.",
        "What do you like?",
        "Say something kind.",
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({"id": f"t{n}", "prompt": p}) + "\n"
                                                  for n, p in enumerate(prompts)))  # fmt: skip
    config = tmp_path / "train.toml"
    config.write_text(CONFIG.format(agent=tmp_path / "agent.mjs"))
    runs, log = tmp_path / "runs", tmp_path / "stderr.log"
    metrics = runs / "node-run" / "metrics.jsonl"

    held = tmp_path / "held"
    held.mkdir()
    first = parity_train("--config", str(config), "--output-dir", str(runs), "--run-id", "node-run", stderr=log,
                         env={"HOLD_METRICS": str(metrics), "HOLD_DIR": str(held)})  # fmt: skip

    def a_rollout_held() -> bool:
        assert first.poll() is None, log.read_text()[-3000:]
        return any(held.iterdir())

    # Ctrl-C while the run cannot finish its step: it has recorded two steps, and a rollout it needs waits.
    eventually(
        a_rollout_held,
        timeout_s=600,
        interval_s=0.5,
        what="a rollout held after two training steps",
    )
    recorded = train_steps(metrics)
    first.send_signal(signal.SIGINT)
    stdout, _ = first.communicate(timeout=300)
    assert first.returncode == 130, log.read_text()[-3000:]
    stopped = json.loads(stdout.strip().splitlines()[-1])
    assert stopped["state"] == "stopped" and stopped["checkpoint"].startswith("node-run/step-")
    assert stopped["resume_command"].startswith("parity train --resume node-run")
    stopped_at = int(stopped["checkpoint"].rsplit("-", 1)[1])
    assert 2 <= recorded[-1] <= stopped_at < 5, (recorded, stopped_at)

    second = parity_train("--resume", "node-run", "--output-dir", str(runs), stderr=log)
    stdout, _ = second.communicate(timeout=600)
    assert second.returncode == 0, log.read_text()[-3000:]
    finished = json.loads(stdout.strip().splitlines()[-1])
    assert finished["state"] == "completed" and finished["steps"] == 5, finished
    # The resumed run picked up at its checkpoint: every step is recorded once.
    assert train_steps(metrics) == [1, 2, 3, 4, 5]
    assert (Path(finished["exported_model"]) / "model.safetensors").exists()
    assert Path(finished["plot"]).exists()


def test_sigterm_stops_the_run_after_its_step_with_a_checkpoint_and_takes_the_stack_down(
    tmp_path,
) -> None:
    # What `kill`, `timeout`, systemd and a Kubernetes pod's end send; a background job ignores SIGINT.
    runs, log = tmp_path / "runs", tmp_path / "stderr.log"
    run = parity_train("--config", str(REPO_ROOT / "examples/speak_in_words/train.toml"), "--checkpoint-interval", "1",
                       "--output-dir", str(runs), "--run-id", "termed", stderr=log)  # fmt: skip

    def one_step() -> bool:
        assert run.poll() is None, log.read_text()[-3000:]
        return len(train_steps(runs / "termed" / "metrics.jsonl")) >= 1

    eventually(one_step, timeout_s=300, interval_s=0.5, what="a training step")
    stack = psutil.Process(run.pid).children(recursive=True)
    assert stack, "parity train brought up its stack"
    run.send_signal(signal.SIGTERM)
    stdout, _ = run.communicate(timeout=300)
    assert run.returncode == 143, log.read_text()[-3000:]
    stopped = json.loads(stdout.strip().splitlines()[-1])
    assert stopped["state"] == "stopped" and stopped["error"] == "stopped by SIGTERM", stopped
    assert stopped["checkpoint"].startswith("termed/step-") and stopped[
        "resume_command"
    ].startswith("parity train")
    _, alive = psutil.wait_procs(stack, timeout=30)
    assert not alive, [process.info for process in alive]


def test_a_stack_that_does_not_come_up_ends_the_run_with_why(tmp_path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (broken / "chat_template.jinja").write_text("{{ messages }}")
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0", "prompt": "hi"}\n')
    run = parity_train("--agent", "json:dumps", "--tasks", str(tmp_path / "tasks.jsonl"), "--model", str(broken),
                       "--output-dir", str(tmp_path / "runs"), stderr=tmp_path / "stderr.log")  # fmt: skip
    stdout, _ = run.communicate(timeout=300)
    assert run.returncode == 1
    result = json.loads(stdout.strip().splitlines()[-1])
    # Ended by the stack's exit, which it names, not by the startup timeout (900 s) it would otherwise have waited
    # out: communicate() above gives it well under that.
    assert result["state"] == "failed" and "parity up exited" in result["error"]
    assert "logs in" in result["error"]


def test_an_unusable_model_ends_the_run_with_the_fix_before_any_service_starts(tmp_path) -> None:
    folder = tmp_path / "no-template"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0", "prompt": "hi"}\n')
    run = parity_train("--agent", "json:dumps", "--tasks", str(tmp_path / "tasks.jsonl"), "--model", str(folder),
                       "--output-dir", str(tmp_path / "runs"), stderr=tmp_path / "stderr.log")  # fmt: skip
    stdout, _ = run.communicate(timeout=60)
    said = (tmp_path / "stderr.log").read_text()
    assert run.returncode == 2 and stdout == ""
    assert f"model: {folder} has no chat template" in said and "add chat_template.jinja" in said
    assert not (tmp_path / "runs").exists(), "nothing started"


def test_the_langgraph_example_runs_on_the_stack_parity_train_brings_up_whose_ingest_checks_tokens(
    tmp_path,
) -> None:
    # The framework's client sends the key the SDK holds; a literal key is refused (401) by this stack.
    log = tmp_path / "stderr.log"
    run = parity_train("--config", str(REPO_ROOT / "examples/langgraph_tools/train.toml"), "--model", "tiny-test",
                       "--steps", "1", "--groups-per-batch", "1", "--rollouts-per-task", "2", "--val-tasks", "",
                       "--output-dir", str(tmp_path / "runs"), stderr=log)  # fmt: skip
    stdout, _ = run.communicate(timeout=600)
    assert run.returncode == 0, log.read_text()[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["state"] == "completed" and result["steps"] == 1, result
