"""Agents that run subagents: tokens in samples ÷ unique tokens when 2, 3 or 5 conversations interleave in one
session, before and after the assembler merged each thread on its own; in one run on real vLLM.

Serves the small model with a template that drops earlier turns' reasoning (Qwen3's way) behind a store, an
assembler and an ingest. One episode holds N conversations (an orchestrator and its workers, each with its own
opening), their calls alternating round by round, each re-sending its own history:
- `plain`: replies of whole words, as deployed. The untrained model is held to a few words' single tokens
  (vLLM's allowed_token_ids), so the text it returns renders back to the ids it sampled: any split left is the
  merge's, not a re-tokenization (what a random model's free text would cause in any agent, one thread or many);
- `exact`: replies `<think>…</think>answer` in exact_history.

Unique tokens are what the conversations hold: the sum of each one's last prompt and reply (from the answers'
usage). "after" is the assembler's own figure (GetTrajectory's token_count). "before" merges the same captured
calls with the assembler's merge as it was at BEFORE_COMMIT (read from git, not copied): one open sequence,
split whenever another conversation's call came in between. For `exact`, ingest's history book then also knew
only a trajectory's last call, so every interleaved call was rendered as deployed: its "before" merges the
calls of the same episode run as deployed.

    .venv/bin/python bench/threads.py            # about 6 minutes on 2 cores
    .venv/bin/python bench/threads.py --quick    # 2 and 3 threads, 4 and 8 rounds
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from multi_turn import MODEL, start_mesh
from openai.types.chat import ChatCompletionMessageParam
from processes import Processes
from scratch import scratch_dir
from tokenizers import Tokenizer

import parity
from parity import engine
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, StoreClient
from parity.services.assembler.samples import trainable_steps
from parity.services.assembler.trajectories import split_trajectories

# The last commit whose assembler merged only into the sequence the previous call left open.
BEFORE_COMMIT = "b6466a7"
REPO_ROOT = Path(__file__).resolve().parent.parent
THINKING = {"structured_outputs": {"regex": r"<think>[a-z ]{1,8}</think>[a-z ]{1,8}"}}
WORDS = (" yes", " no", " good", " bad", " true", " false")


def plain_replies(model_dir: Path) -> dict:
    """Sampling held to whole words, each one token, and the end of the turn."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = [tokenizer.encode(word).ids for word in WORDS]
    if any(len(word_ids) != 1 for word_ids in ids):
        raise SystemExit(f"each of {WORDS} must be one token of the bench model, got {ids}")
    end = tokenizer.token_to_id("<|im_end|>")
    return {"allowed_token_ids": [word_ids[0] for word_ids in ids] + [end]}


def interleaved(threads: int, rounds: int, reply: dict, finals: list[int]):
    """An episode of `threads` conversations whose calls alternate; appends each conversation's final length."""

    async def agent(task: dict) -> float:
        client = parity.get_async_chat_client()
        histories: list[list[ChatCompletionMessageParam]] = [
            [{"role": "user", "content": f"Worker {t}: what is {t} plus {task['id']}?"}]
            for t in range(threads)
        ]
        lengths = [0] * threads
        for _ in range(rounds):
            for t, messages in enumerate(histories):
                answer = await client.chat.completions.create(
                    model=MODEL, messages=messages, max_tokens=24, temperature=1.0, extra_body=reply
                )
                assert answer.usage is not None
                lengths[t] = answer.usage.prompt_tokens + answer.usage.completion_tokens
                messages += [{"role": "assistant", "content": answer.choices[0].message.content},
                             {"role": "user", "content": "Go on."}]  # fmt: skip
        finals.extend(lengths)
        return 1.0

    return agent


def merge_before() -> ModuleType:
    """The assembler's prefix merge as it was at BEFORE_COMMIT."""
    source = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{BEFORE_COMMIT}:services/assembler/prefix_merge.py"],
                            check=True, capture_output=True, text=True).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader("prefix_merge_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{BEFORE_COMMIT}:prefix_merge.py", "exec"), module.__dict__)
    return module


def run_episode(store: StoreClient, assembler: AssemblerClient, threads: int, rounds: int, replies: dict[str, dict],
                style: str, mode: str):  # fmt: skip
    finals: list[int] = []
    (result,) = engine.run(interleaved(threads, rounds, replies[style], finals), [{"id": f"{threads}x{rounds}"}],
                           rollouts_per_task=1, retries=0, progress=False, history_mode=mode,
                           run_id=f"threads-{style}-{mode}-{threads}-{rounds}", training_run="bench")  # fmt: skip
    if result.outcome != "succeeded":
        raise SystemExit(f"{threads} threads, {rounds} rounds, {style} {mode}: {result.error}")
    view = assembler.get_trajectory(assembler_pb.GetTrajectoryRequest(
        session_id=result.session_id, view=assembler_pb.TRAJECTORY_VIEW_BASIC)).trajectory  # fmt: skip
    (contents,) = store.batch_get_sessions(store_pb.BatchGetSessionsRequest(
        session_ids=[result.session_id], view=store_pb.CALL_VIEW_FULL)).sessions  # fmt: skip
    return view, contents, sum(finals)


def before_ratio(
    module: ModuleType, contents: store_pb.SessionContents, unique: int
) -> tuple[float, int]:
    (trajectory,), _ = split_trajectories(
        contents.session.session_id, contents.calls, contents.rewards
    )
    steps, _ = trainable_steps(trajectory)
    old = [module.StepTokens(s.call_id, s.index, s.prompt,
                             tuple(module.ChoiceTokens(c.token_ids, c.logprobs) for c in s.choices), s.policy_version)
           for s in steps]  # fmt: skip
    merged = module.merge_steps(old)
    return sum(s.token_count for s in merged.sequences) / unique, merged.splits


def measure(threads_list: list[int], rounds_list: list[int], store: StoreClient, assembler: AssemblerClient,
            replies: dict[str, dict]) -> list[dict]:  # fmt: skip
    module = merge_before()
    rows = []
    for style, mode in (("plain", "as_deployed"), ("exact", "exact_history")):
        for threads in threads_list:
            for rounds in rounds_list:
                view, contents, unique = run_episode(
                    store, assembler, threads, rounds, replies, style, mode
                )
                # Before, exact_history fell back to the as-deployed prompt on every interleaved call.
                captured = (
                    contents
                    if mode == "as_deployed"
                    else run_episode(
                        store, assembler, threads, rounds, replies, style, "as_deployed"
                    )[1]
                )
                before, splits_before = before_ratio(module, captured, unique)
                rows.append({"replies": style, "mode": mode, "threads": threads, "rounds": rounds,
                             "calls": len(contents.calls), "unique": unique, "before": before,
                             "splits_before": splits_before, "after": view.token_count / unique,
                             "splits_after": view.split_count, "threads_found": view.thread_count})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 and 3 threads, 4 and 8 rounds")
    args = parser.parse_args(argv)
    threads_list, rounds_list = ([2, 3], [4, 8]) if args.quick else ([2, 3, 5], [4, 8, 16])
    with scratch_dir("threads") as scratch:
        processes = Processes(scratch)
        try:
            ingest_url, assembler, store = start_mesh(processes, scratch)
            parity.configure(
                ingest_url=ingest_url, assembler_address=assembler, store_address=store
            )
            replies = {"plain": plain_replies(scratch / "model"), "exact": THINKING}
            rows = measure(
                threads_list, rounds_list, StoreClient(store), AssemblerClient(assembler), replies
            )
        finally:
            processes.stop()
    print(f"\n{'replies':<7} {'mode':<14} {'threads':>7} {'rounds':>6} {'calls':>5} {'unique':>6} "
          f"{'before':>7} {'after':>6} {'splits before':>13} {'after':>5} {'threads found':>13}")  # fmt: skip
    for r in rows:
        print(f"{r['replies']:<7} {r['mode']:<14} {r['threads']:>7} {r['rounds']:>6} {r['calls']:>5} {r['unique']:>6} "
              f"{r['before']:>6.2f}x {r['after']:>5.2f}x {r['splits_before']:>13} {r['splits_after']:>5} "
              f"{r['threads_found']:>13}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
