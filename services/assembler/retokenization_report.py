"""How many samples a retokenizing trainer would get wrong, on your own model and run.

    python -m parity.services.assembler.retokenization_report --store 127.0.0.1:50051 --tokenizer MODEL_DIR

It reads every session the store holds (calls captured from vLLM with their exact
token ids), builds Parity's samples from those ids, and compares each with what a
trainer that keeps only text would train on: the sample decoded to text and
tokenized again. A sample differs when any token id does. Completions are checked
the same way on their own, as trainers that re-tokenize the assistant's reply do.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from parity.api.store.v1 import store_service_pb2 as pb
from parity.clients import AsyncStoreClient
from parity.core import tokens
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.store_client import rebuild_prompts
from parity.services.assembler.trajectories import split_trajectories


class Tokenizer(Protocol):
    # transformers' decode is typed for a batch of sequences too; one sequence decodes to one str.
    def decode(self, token_ids: list[int], **kwargs: Any) -> str | list[str]: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


@dataclass
class Report:
    samples: int = 0
    differing_samples: int = 0
    tokens: int = 0
    # Per differing sample: where the re-tokenized ids first part from the exact ones.
    first_divergence: list[int] = field(default_factory=list)
    length_changes: list[int] = field(default_factory=list)
    completions: int = 0
    differing_completions: int = 0
    example: str = ""

    def render(self) -> str:
        def share(part: int, whole: int) -> str:
            return f"{part:,} of {whole:,} ({100 * part / whole:.1f}%)" if whole else "0 of 0"

        lines = [
            "Retokenization report: Parity's exact token ids vs. decode-then-tokenize",
            f"  samples that would differ:      {share(self.differing_samples, self.samples)}",
            f"  completions that would differ:  {share(self.differing_completions, self.completions)}",
            f"  tokens in the samples:          {self.tokens:,}",
        ]
        if self.first_divergence:
            lines.append(
                f"  first differing token, median:  position {statistics.median(self.first_divergence):,.0f}"
            )
            lines.append(
                f"  length change, median:          {statistics.median(self.length_changes):+,.0f} tokens"
            )
        if self.example:
            lines.append(f"  example: {self.example}")
        return "\n".join(lines)


def compare(
    tokenizer: Tokenizer, sequences: Iterable[Sequence[int]], completions: Iterable[Sequence[int]]
) -> Report:
    report = Report()
    for ids in sequences:
        exact = list(ids)
        report.samples += 1
        report.tokens += len(exact)
        again = _round_trip(tokenizer, exact)
        if again != exact:
            report.differing_samples += 1
            first = next(
                (i for i, (a, b) in enumerate(zip(exact, again, strict=False)) if a != b),
                min(len(exact), len(again)),
            )
            report.first_divergence.append(first)
            report.length_changes.append(len(again) - len(exact))
            if not report.example:
                report.example = f"exact {exact[first : first + 4]} became {again[first : first + 4]} at position {first}"
    for ids in completions:
        exact = list(ids)
        report.completions += 1
        if _round_trip(tokenizer, exact) != exact:
            report.differing_completions += 1
    return report


def _round_trip(tokenizer: Tokenizer, token_ids: list[int]) -> list[int]:
    """The ids of the text the ids decode to."""
    text = tokenizer.decode(token_ids, skip_special_tokens=False)
    assert isinstance(text, str)
    return tokenizer.encode(text, add_special_tokens=False)


async def read_run(address: str, limit: int) -> tuple[list[list[int]], list[list[int]]]:
    """Parity's samples and the sampled completions of up to `limit` sessions in the store."""
    sequences: list[list[int]] = []
    completions: list[list[int]] = []
    store = AsyncStoreClient(address, max_message_bytes=256 << 20)
    try:
        token, seen = "", 0
        while seen < limit:
            page = await store.list_sessions(
                pb.ListSessionsRequest(page_size=100, page_token=token)
            )
            ids = [s.session_id for s in page.sessions if s.call_count][: limit - seen]
            seen += len(ids)
            if ids:
                response = await store.batch_get_sessions(
                    pb.BatchGetSessionsRequest(session_ids=ids, view=pb.CALL_VIEW_SPLICED))  # fmt: skip
                for contents in response.sessions:
                    rebuild_prompts(contents)
                    trajectories, _ = split_trajectories(
                        contents.session.session_id, contents.calls, contents.rewards
                    )
                    for trajectory in trajectories:
                        built = build_samples(trajectory, "", "", LengthLimit())
                        sequences += [
                            tokens.unpack_token_ids(s.token_ids).tolist() for s in built.samples
                        ]
                    completions += [tokens.unpack_token_ids(c.token_ids).tolist()
                                    for call in contents.calls for c in call.choices if c.token_ids]  # fmt: skip
            token = page.next_page_token
            if not token:
                break
    finally:
        await store.close()
    return sequences, completions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="parity assembler retokenization-report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--store", default="127.0.0.1:50051", help="the token store's gRPC address")
    parser.add_argument(
        "--tokenizer", required=True, help="the served model's folder or Hugging Face name"
    )
    parser.add_argument("--limit", type=int, default=10_000, help="sessions to read at most")
    args = parser.parse_args(argv)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("the report needs transformers: pip install 'parity[model]'", file=sys.stderr)
        return 2
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sequences, completions = asyncio.run(read_run(args.store, args.limit))
    print(compare(tokenizer, sequences, completions).render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
