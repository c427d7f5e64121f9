"""The mixed row: one ingest and its SQLite store loaded as agents load it, 64 connections over 1,000 sessions, every
other request streamed; on this checkout, or alternately on it and another (docs/design/ingest-mixed-load.md)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from processes import Processes, cpu_seconds
from wrk_load import BODY, wrk

MIXED_CONNECTIONS = 64
MIXED_SESSIONS = 1000


def _mixed_lua(sessions: int) -> str:
    """Each request names one of `sessions` sessions in its URL, spread over them, and every other one streams."""
    plain, streamed = json.dumps(BODY | {"stream": False}), json.dumps(BODY | {"stream": True})
    return (
        "local threads = 0\n"
        'function setup(thread) threads = threads + 1; thread:set("id", threads) end\n'
        "local count = 0\n"
        'local headers = {["Content-Type"] = "application/json"}\n'
        f"local plain, streamed = [[{plain}]], [[{streamed}]]\n"
        "function request()\n"
        "  count = count + 1\n"
        f"  local session = (count * 7919 + id * 104729) % {sessions}\n"
        "  local body = (count % 2 == 0) and streamed or plain\n"
        '  return wrk.format("POST", "/sessions/mixed-" .. session .. "/v1/chat/completions", headers, body)\n'
        "end\n"
    )


def code_tree(tree: Path, scratch: Path, label: str) -> dict[str, str]:
    """The environment that runs `parity` from a checkout: its SDK and services copied into one package
    on PYTHONPATH, which comes before this checkout's editable install."""
    package = scratch / "trees" / label / "parity"
    if not package.exists():
        shutil.copytree(tree / "sdk" / "parity", package)
        shutil.copytree(tree / "services", package / "services")
    return {"PYTHONPATH": str(package.parent)}


def mixed_load(
    scratch: Path, seconds: float, trees: dict[str, dict[str, str]], rounds: int
) -> list[dict[str, Any]]:
    """Requests per second of one ingest and its SQLite store under the mixed load, for each code tree, the trees
    taking turns `rounds` times; each round starts a fresh store."""
    rows = []
    for round_number in range(rounds):
        for label, env in trees.items():
            processes = Processes(scratch / f"mixed-{label}-{round_number}")
            processes.scratch.mkdir(parents=True, exist_ok=True)
            try:
                url, (ingest,) = processes.start_ingests(processes.start_stub(), 1, env)
                measured, store_group = (
                    processes.pids([ingest, "store-x1"]),
                    processes.pids(["store-x1"]),
                )
                processes.wait_idle()
                script = processes.scratch / "mixed.lua"
                script.write_text(_mixed_lua(MIXED_SESSIONS))
                before, store_before = cpu_seconds(measured), cpu_seconds(store_group)
                result = wrk(
                    url.removesuffix("/v1"),
                    MIXED_CONNECTIONS,
                    seconds,
                    False,
                    processes.scratch,
                    script=script,
                )
                cpu, store_cpu = (
                    cpu_seconds(measured) - before,
                    cpu_seconds(store_group) - store_before,
                )
                processes.wait_idle()
                rss_mb = sum(_rss_mb(pid) for pid in measured)
            finally:
                processes.stop()
            calls = max(result["rps"] * seconds, 1)
            rows.append({"tree": label, "round": round_number, "rps": result["rps"], "errors": result["errors"],
                         "p50_ms": result["p50_ms"], "cpu_ms_per_call": 1000 * cpu / calls,
                         "store_cpu_ms_per_call": 1000 * store_cpu / calls, "rss_mb": rss_mb})  # fmt: skip
    return rows


def _rss_mb(pid: int) -> float:
    """Resident memory of a process group's leader (the service itself)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def print_mixed(rows: list[dict[str, Any]]) -> None:
    print(f"{'tree':>10} {'round':>5} | {'rps':>8}{'p50 ms':>8} | {'CPU ms per call':>16}{'of it store':>12} | "
          f"{'RSS MB':>7} | errors")  # fmt: skip
    for row in rows:
        print(f"{row['tree']:>10} {row['round']:>5} | {row['rps']:>8,.0f}{row['p50_ms']:>8.2f} | "
              f"{row['cpu_ms_per_call']:>16.2f}{row['store_cpu_ms_per_call']:>12.2f} | {row['rss_mb']:>7.0f} | "
              f"{row['errors']}")  # fmt: skip
    trees = list(dict.fromkeys(row["tree"] for row in rows))
    means = {
        tree: statistics.mean(row["rps"] for row in rows if row["tree"] == tree) for tree in trees
    }
    if len(trees) == 2:
        print(
            f"{trees[0]} / {trees[1]}: {means[trees[0]] / means[trees[1]]:.2f}x (mean requests/s over the rounds)"
        )
    print(
        f"mixed: {MIXED_CONNECTIONS} connections over {MIXED_SESSIONS:,} sessions, every other request streamed, "
        f"one ingest and its SQLite store, {os.cpu_count()} cores shared with wrk and the stub\n"
    )
