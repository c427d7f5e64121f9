"""Several LoRA runs of one agent on one stack at once, against the same runs one after another on the same stack.

One `parity up --max-concurrent-runs N --vllm-lora-rank R` serves both phases: first the N runs one after another
(the baseline), then the same N at once, each `parity train --stack ... --lora-rank R` with its own run id and
seed. Reported per phase: the wall time of all N runs, the stack's peak memory (the proportional set size of
every process `parity up` started, sampled each second, so pages the processes share count once) and each
process's share of it at that peak, the drivers' (the agents' side) apart, and each run's held-out pass@1 before
and after.

    .venv/bin/python bench/concurrent_runs.py                     # the calculator example, 4 runs
    .venv/bin/python bench/concurrent_runs.py --runs 2 --steps 2  # a quicker look

The default model and the calculator example take about 40 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from processes import REPO, free_port
from scratch import scratch_dir

from parity.core.model_defaults import DEFAULT_MODEL
from parity.services.inference.packaged_models import resolve_model
from parity.services.trainer.compute_defaults import resolve_dtype

PARITY = str(REPO / ".venv" / "bin" / "parity")
SAMPLE_S = 1.0


@dataclass
class PeakMemory:
    """The largest summed PSS of a process tree (and of some other processes) seen while it runs."""

    roots: list[int]
    peak_bytes: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)
    """Each kind of process's PSS (`process_kind`) at the sample where the sum peaked."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            sample: dict[str, int] = {}
            for pid in (pid for root in self.roots for pid in tree(root)):
                kind = process_kind(pid)
                sample[kind] = sample.get(kind, 0) + pss(pid)
            if sum(sample.values()) > self.peak_bytes:
                self.peak_bytes, self.at_peak = sum(sample.values()), sample

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes


def tree(root: int) -> list[int]:
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                queue += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def process_kind(pid: int) -> str:
    """vllm, a Parity service by name (trainer, store, ...), or the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    if any("vllm" in arg.lower() for arg in argv):
        return "vllm"
    if "serve" in argv and "parity.cli" in argv:
        return argv[argv.index("parity.cli") + 1]
    return Path(argv[0]).name if argv and argv[0] else "?"


def pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def start_stack(
    data: Path, model: Path, runs: int, lora_rank: int
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    ports = {
        name: free_port()
        for name in ("store", "assembler", "trainer", "ingest", "vllm", "http", "console")
    }
    command = [PARITY, "up", "--data-dir", str(data), "--model", str(model), "--max-concurrent-runs", str(runs),
               # What the runs compute in (`dtype` auto), as the stack `parity train` starts serves it.
               "--vllm-dtype", resolve_dtype("auto"),
               "--vllm-lora-rank", str(lora_rank), *[arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]]  # fmt: skip
    stack = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert stack.stdout is not None
    while "Parity is up" not in (line := stack.stdout.readline()):
        if not line:
            raise SystemExit(f"parity up exited early; see {data / 'logs'}")
    threading.Thread(target=stack.stdout.read, daemon=True).start()
    tokens = data / "tokens"
    environment = os.environ | {
        "PARITY_TOKEN_FILE": str(tokens / "admin.token"),
        "PARITY_API_KEY": (tokens / "agent.token").read_text().strip(),
    }
    address = (f"ingest=http://127.0.0.1:{ports['http']},assembler=127.0.0.1:{ports['assembler']},"
               f"trainer=127.0.0.1:{ports['trainer']},store=127.0.0.1:{ports['store']}")  # fmt: skip
    return stack, environment | {"BENCH_STACK": address, "BENCH_MODEL": str(model)}


def train(
    args: argparse.Namespace, environment: dict[str, str], run_id: str, seed: int, out: Path
) -> subprocess.Popen[str]:
    command = [PARITY, "train", "--config", args.config, "--stack", environment["BENCH_STACK"], "--model",
               environment["BENCH_MODEL"], "--lora-rank",
               str(args.lora_rank), "--learning-rate", str(args.learning_rate), "--seed", str(seed), "--run-id", run_id,
               "--output-dir", str(out), *(["--steps", str(args.steps)] if args.steps else [])]  # fmt: skip
    log = (out / f"{run_id}.log").open("w")
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=log, text=True, env=environment, cwd=REPO
    )


def result_of(process: subprocess.Popen[str], log: Path) -> dict[str, object]:
    output, _ = process.communicate()
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"parity train exited {process.returncode}:\n{log.read_text()[-3000:]}")
    return json.loads(lines[-1])


def phase(args: argparse.Namespace, stack: subprocess.Popen[str], environment: dict[str, str], out: Path,
          label: str, together: bool) -> dict[str, object]:  # fmt: skip
    started = time.monotonic()
    stack_memory = PeakMemory([stack.pid])
    drivers: list[subprocess.Popen[str]] = []
    driver_memory = PeakMemory([])
    results = []
    for n in range(args.runs):
        process = train(args, environment, f"{label}-{n + 1}", args.seed + n, out)
        drivers.append(process)
        driver_memory.roots.append(process.pid)
        if not together:
            results.append(result_of(process, out / f"{label}-{n + 1}.log"))
    if together:
        results = [
            result_of(process, out / f"{label}-{n + 1}.log") for n, process in enumerate(drivers)
        ]
    return {
        "wall_s": time.monotonic() - started,
        "stack_peak_bytes": stack_memory.stop(),
        "stack_at_peak_bytes": stack_memory.at_peak,
        "driver_peak_bytes": driver_memory.stop(),
        "runs": [
            {
                key: result.get(key)
                for key in (
                    "run_id",
                    "state",
                    "error",
                    "val_pass_before",
                    "val_pass_after",
                    "wall_seconds",
                )
            }
            for result in results
        ],  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--config", default="examples/calculator/train.toml")
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="the base model, as `parity up --model` takes it"
    )
    parser.add_argument("--steps", type=int, default=0, help="each run's steps; 0: the config's")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with scratch_dir("concurrent-runs") as scratch:
        model = resolve_model(args.model).resolve()
        stack, environment = start_stack(scratch / "stack", model, args.runs, args.lora_rank)
        try:
            phases = {label: phase(args, stack, environment, scratch, label, together)
                      for label, together in (("sequential", False), ("concurrent", True))}  # fmt: skip
        finally:
            stack.send_signal(signal.SIGINT)
            stack.wait(180)
        report(args, phases)
        failed = [run["run_id"] for measured in phases.values() for run in measured["runs"]  # type: ignore[attr-defined]
                  if run["state"] != "completed"]  # fmt: skip
        if failed:
            # Inside the scratch folder's block: it is kept, with every process's log.
            raise SystemExit(f"runs {', '.join(map(str, failed))} did not complete")


def report(args: argparse.Namespace, phases: dict[str, dict[str, object]]) -> None:
    def gib(value: object) -> str:
        return f"{float(value) / 2**30:.2f} GiB"  # type: ignore[arg-type]

    print(
        f"\n{args.runs} LoRA runs (rank {args.lora_rank}, learning rate {args.learning_rate:g}) of {args.config}"
    )
    print(f"{'phase':<12} {'wall':>9} {'stack peak':>12} {'drivers peak':>13}")
    for label, measured in phases.items():
        print(f"{label:<12} {measured['wall_s']:>8.0f}s {gib(measured['stack_peak_bytes']):>12} "
              f"{gib(measured['driver_peak_bytes']):>13}")  # fmt: skip
    for label, measured in phases.items():
        shares = sorted(measured["stack_at_peak_bytes"].items(), key=lambda item: -item[1])  # type: ignore[attr-defined]
        print(
            f"{label} stack at its peak: "
            + ", ".join(f"{kind} {gib(value)}" for kind, value in shares)
        )
    sequential, concurrent = phases["sequential"], phases["concurrent"]
    ratios = {
        "wall": float(concurrent["wall_s"]) / float(sequential["wall_s"]),  # type: ignore[arg-type]
        "stack_peak": float(concurrent["stack_peak_bytes"]) / float(sequential["stack_peak_bytes"]),  # type: ignore[arg-type]
    }
    print(
        f"concurrent ÷ sequential: wall {ratios['wall']:.2f}×, stack peak memory {ratios['stack_peak']:.2f}×"
    )
    print(f"{'run':<14} {'state':<10} {'pass@1 before':>14} {'after':>7}")
    for measured in phases.values():
        for run in measured["runs"]:  # type: ignore[attr-defined]
            before, after = (run.get(key) or {} for key in ("val_pass_before", "val_pass_after"))
            print(f"{run['run_id'] or '?':<14} {run['state']:<10} {before.get('pass@1', float('nan')):>14.2f} "
                  f"{after.get('pass@1', float('nan')):>7.2f}")  # fmt: skip
    print(json.dumps({"ratios": ratios, **phases}))


if __name__ == "__main__":
    main()
