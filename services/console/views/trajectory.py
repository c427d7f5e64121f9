"""One trajectory as the model saw it: each call's prompt and sampled tokens, in order, with
where prefix merging joined calls into one training sequence or split them, and why.

The page reads as one stream of tokens per thread. A thread's first call shows its whole
prompt; a later call shows only the prompt tokens past the sequence it continues (its
shared prefix is what the blocks above already show), and a call that broke the prefix
shows where it diverged. Joins follow the assembler's rule exactly (call_joins.py); a
trajectory of several threads (an agent and its subagents) shows them side by side.

Loss masks come from the assembler's samples (GetTrajectory, FULL): a token's mask is the
sample's, at the same position, since every call's prompt is a prefix of the sample it
is in. A trajectory the assembler has not built shows no mask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2, sample_pb2
from parity.core import tokens
from parity.services.console.views.call_joins import CallJoins, JoinView
from parity.services.console.views.format import enum_label, seconds, timestamp_text
from parity.services.console.views.token_text import TokenTexts

# Logprob thresholds of the colour bins: p >= 0.9, 0.5, 0.2, 0.05, 0.01, and below.
LOGPROB_BINS = (np.log(0.9), np.log(0.5), np.log(0.2), np.log(0.05), np.log(0.01))
MASK_UNKNOWN = -1
_USABLE_OUTCOMES = (llm_call_pb2.CALL_OUTCOME_UNSPECIFIED, llm_call_pb2.CALL_OUTCOME_SUCCEEDED)


@dataclass(slots=True)
class TokenView:
    id: int
    text: str
    # Sampled tokens only: the logprob vLLM reported, and its colour bin (0 likely .. 5 unlikely).
    logprob: float | None = None
    bin: int = -1
    mask: int = MASK_UNKNOWN
    diverged: bool = False
    # Sampled tokens a distillation teacher scored (teacher_gap.py): both logprobs, and whether
    # the student departs from the teacher there.
    teacher: float | None = None
    student: float | None = None
    departs: bool = False

    @property
    def css(self) -> str:
        """Classes: p(rompt) or s(ampled) with its logprob bin, the mask (m1, m0, mu: none), x where a prefix
        broke, dep where the student departs from its teacher."""
        kind = f"s b{self.bin}" if self.logprob is not None else "p"
        mask = "mu" if self.mask == MASK_UNKNOWN else f"m{self.mask}"
        classes = f"tk {kind} {mask} x" if self.diverged else f"tk {kind} {mask}"
        return f"{classes} dep" if self.departs else classes


@dataclass
class ToolCallView:
    name: str
    arguments: str
    call_id: str


@dataclass
class MessageView:
    role: str
    content: str
    name: str = ""


@dataclass
class ChoiceView:
    index: int
    tokens: list[TokenView]
    finish_reason: str
    text: str
    reasoning: str
    tool_calls: list[ToolCallView]
    mean_logprob: float | None
    least_likely: TokenView | None
    # The assembler's samples that followed this choice; none when it is in no sample or unknown.
    sample_ids: tuple[str, ...]

    @property
    def trained(self) -> bool:
        return bool(self.sample_ids)


@dataclass
class CallView:
    position: int
    call: llm_call_pb2.LlmCall
    join: JoinView
    messages: list[MessageView]
    prompt: list[TokenView]
    choices: list[ChoiceView]
    step_reward: float | None
    sample_note: str
    # The thread of the trajectory the call continues, numbered from 0 in the order they opened.
    thread: int = 0

    @property
    def outcome(self) -> str:
        return (
            enum_label(llm_call_pb2.CallOutcome, self.call.outcome, "CALL_OUTCOME_")
            if self.call.outcome
            else ""
        )

    @property
    def external(self) -> bool:
        return self.call.kind == llm_call_pb2.CALL_KIND_EXTERNAL

    @property
    def timings(self) -> list[tuple[str, str]]:
        t = self.call.timings
        rows = [("started", timestamp_text(t.start_time))]
        if t.HasField("end_time") and t.HasField("start_time"):
            rows.append(
                (
                    "took",
                    f"{(t.end_time.ToNanoseconds() - t.start_time.ToNanoseconds()) / 1e6:,.0f} ms",
                )
            )
        if t.HasField("time_to_first_token"):
            rows.append(("first token", f"{seconds(t.time_to_first_token) * 1e3:,.0f} ms"))
        if t.HasField("upstream_duration"):
            rows.append(("upstream", f"{seconds(t.upstream_duration) * 1e3:,.0f} ms"))
        if t.upstream_attempts > 1:
            rows.append(("attempts", str(t.upstream_attempts)))
        return [(k, v) for k, v in rows if v]


@dataclass
class TrajectorySection:
    """One trajectory's section of the session page: its calls token by token, and what the assembler made of it."""

    name: str
    calls: list[CallView]
    assembled: bool
    state: str = ""
    filter_reason: str = ""
    reward: float | None = None
    group_id: str = ""
    episode_id: str = ""
    samples: list[tuple[int, int, bool]] = field(default_factory=list)
    """(tokens, loss tokens, truncated) of each sample."""
    split_count: int = 0
    history_mode: str = ""
    """as_deployed or exact_history: how the calls' prompts were built."""
    teacher_gaps: list[tuple[str, float]] = field(default_factory=list)
    """(the calls it spans, its mean teacher gap) of each sample a distillation teacher scored."""
    thread_names: list[str] = field(default_factory=list)
    """Each thread's name, as the agent gave it (empty when the token ids found it), in the order they opened."""

    @property
    def thread_count(self) -> int:
        return len(self.thread_names)

    @property
    def threads(self) -> list[tuple[int, str, int, int]]:
        """(number from 1, name, calls, sampled tokens) of each thread."""
        return [(n + 1, name, sum(c.thread == n for c in self.calls),
                 sum(len(ch.tokens) for c in self.calls if c.thread == n for ch in c.choices))
                for n, name in enumerate(self.thread_names)]  # fmt: skip

    @property
    def sampled_count(self) -> int:
        return sum(len(choice.tokens) for call in self.calls for choice in call.choices)

    @property
    def sample_token_count(self) -> int:
        return sum(count for count, _, _ in self.samples)

    @property
    def loss_token_count(self) -> int:
        return sum(loss for _, loss, _ in self.samples)


def build_trajectory(
    name: str,
    calls: list[llm_call_pb2.LlmCall],
    assembled: trajectory_pb2.Trajectory | None,
    texts: TokenTexts,
) -> TrajectorySection:
    samples = list(assembled.samples) if assembled is not None else []
    view = TrajectorySection(name, [], assembled is not None)
    if calls:
        mode = calls[0].history_mode or llm_call_pb2.HISTORY_MODE_AS_DEPLOYED
        view.history_mode = enum_label(llm_call_pb2.HistoryMode, mode, "HISTORY_MODE_")
    if assembled is not None:
        view.state = enum_label(
            trajectory_pb2.TrajectoryState, assembled.state, "TRAJECTORY_STATE_"
        )
        view.filter_reason, view.split_count = assembled.filter_reason, assembled.split_count
        view.reward = assembled.reward if assembled.has_reward else None
        view.group_id, view.episode_id = assembled.group_id, assembled.episode_id
    sample_arrays = [
        (s, tokens.unpack_token_ids(s.token_ids), tokens.unpack_mask(s.loss_mask)) for s in samples
    ]
    view.samples = [(len(ids), int(mask.sum()), s.truncated) for s, ids, mask in sample_arrays]
    step_rewards = (
        {s.call_id: s.reward for s in assembled.steps if s.has_reward}
        if assembled is not None
        else {}
    )
    builder = _Builder(texts, sample_arrays)
    for position, call in enumerate(calls, 1):
        view.calls.append(builder.call(position, call, step_rewards.get(call.call_id)))
    builder.decode()
    view.thread_names = builder.joins.thread_names
    return view


class _Builder:
    """Walks a trajectory's calls in order, keeping every thread's open sequence."""

    def __init__(
        self, texts: TokenTexts, samples: list[tuple[sample_pb2.Sample, np.ndarray, np.ndarray]]
    ) -> None:
        self.texts = texts
        self.samples = samples
        self.joins = CallJoins(texts)
        self._pending: list[TokenView] = []

    def call(self, position: int, call: llm_call_pb2.LlmCall, reward: float | None) -> CallView:
        prompt = tokens.unpack_token_ids(call.prompt_token_ids)
        choices = [tokens.unpack_token_ids(c.token_ids) for c in call.choices]
        trainable = call.kind != llm_call_pb2.CALL_KIND_EXTERNAL and call.outcome in _USABLE_OUTCOMES and any(
            len(c) for c in choices)  # fmt: skip
        request_messages = _request_messages(call)
        join, thread, previous_messages = self.joins.join(
            call, prompt, choices, request_messages or [], None if trainable else _skip_reason(call)
        )
        messages = _new_messages(call, request_messages, previous_messages)
        holding = [(s, ids, mask) for s, ids, mask in self.samples if call.call_id in s.call_ids]
        prompt_mask = holding[0][2] if holding else None
        shown = [
            self._token(t, None, _mask_at(prompt_mask, j))
            for j, t in enumerate(prompt[join.shared :].tolist(), join.shared)
        ]
        if join.kind == "split" and shown:
            shown[0].diverged = True
        views = [
            self._choice(call.choices[i], prompt, ids, holding) for i, ids in enumerate(choices)
        ]
        note = ""
        if holding and (join.kind in ("first", "split", "thread")):
            index = next(i for i, (s, _, _) in enumerate(self.samples) if s is holding[0][0])
            note = f"sample {index + 1} of {len(self.samples)} starts here" + (
                " (truncated)" if holding[0][0].truncated else ""
            )
        return CallView(position, call, join, messages, shown, views, reward, note, thread)

    def decode(self) -> None:
        """Every token's text, decoded in one batch."""
        for token, text in zip(
            self._pending, self.texts.texts([t.id for t in self._pending]), strict=True
        ):
            token.text = text
        self._pending = []

    def _token(self, token_id: int, logprob: float | None, mask: int, bin_: int = -1) -> TokenView:
        token = TokenView(token_id, "", logprob, bin_, mask)
        self._pending.append(token)
        return token

    def _choice(self, choice: llm_call_pb2.Choice, prompt: np.ndarray, ids: np.ndarray,
                holding: list[tuple[sample_pb2.Sample, np.ndarray, np.ndarray]]) -> ChoiceView:  # fmt: skip
        logprobs = (
            tokens.unpack_floats(choice.logprobs) if choice.logprobs else np.zeros(0, np.float32)
        )
        bins = _bins(logprobs).tolist()
        values = logprobs.tolist()
        start = len(prompt)
        # The samples that followed this choice: their tokens after the prompt are the choice's (up to a length cut).
        # Several do where a later call forked the sequence; they agree on this choice's mask.
        followed = [(s, m) for s, s_ids, m in holding
                    if np.array_equal(s_ids[start : start + len(ids)], ids[: max(0, len(s_ids) - start)])]  # fmt: skip
        mask = followed[0][1] if followed else None
        shown = [
            self._token(t, values[i], _mask_at(mask, start + i), bins[i])
            if i < len(values)
            else self._token(t, None, _mask_at(mask, start + i))
            for i, t in enumerate(ids.tolist())
        ]
        least = min(
            (t for t in shown if t.logprob is not None),
            key=lambda t: t.logprob or 0.0,
            default=None,
        )
        return ChoiceView(
            index=choice.index, tokens=shown, finish_reason=choice.finish_reason, text=choice.text,
            reasoning=choice.reasoning_text, tool_calls=_tool_calls(choice.tool_calls_json),
            mean_logprob=float(logprobs.mean()) if len(logprobs) else None, least_likely=least,
            sample_ids=tuple(s.sample_id for s, _ in followed),
        )  # fmt: skip


def _mask_at(mask: np.ndarray | None, position: int) -> int:
    if mask is None or position >= len(mask):
        return MASK_UNKNOWN
    return int(mask[position])


def _bins(logprobs: np.ndarray) -> np.ndarray:
    """Each logprob's colour bin: how many thresholds it falls below."""
    return np.searchsorted(-np.asarray(LOGPROB_BINS), -logprobs, side="left")


def _skip_reason(call: llm_call_pb2.LlmCall) -> str:
    if call.kind == llm_call_pb2.CALL_KIND_EXTERNAL:
        return f"an external model ({call.model}): recorded, never trained on"
    if call.outcome not in _USABLE_OUTCOMES:
        return (
            f"not trained on: {enum_label(llm_call_pb2.CallOutcome, call.outcome, 'CALL_OUTCOME_')}"
        )
    return "not trained on: it sampled no token"


def _tool_calls(raw: bytes) -> list[ToolCallView]:
    if not raw:
        return []
    try:
        calls = json.loads(raw)
    except ValueError:
        return [ToolCallView("(unreadable)", raw.decode(errors="replace"), "")]
    views = []
    for entry in calls if isinstance(calls, list) else []:
        function = entry.get("function") or {} if isinstance(entry, dict) else {}
        arguments = function.get("arguments", "")
        try:
            arguments = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            arguments = str(arguments)
        views.append(
            ToolCallView(str(function.get("name", "")), arguments, str(entry.get("id", "")))
        )
    return views


def _request_messages(call: llm_call_pb2.LlmCall) -> list[object] | None:
    """The request's messages; None for a prompt-only or unreadable request."""
    try:
        request = json.loads(call.request_json) if call.request_json else {}
    except ValueError:
        return None
    if not isinstance(request, dict) or "messages" not in request:
        return None
    return request["messages"] if isinstance(request["messages"], list) else []


def _new_messages(
    call: llm_call_pb2.LlmCall, messages: list[object] | None, previous: list[object]
) -> list[MessageView]:
    """The messages this call's request added to its thread's call before it (the reply it sampled excluded)."""
    if messages is None:
        try:
            request = json.loads(call.request_json) if call.request_json else {}
        except ValueError:
            return []
        prompt = request.get("prompt") if isinstance(request, dict) else None
        return [MessageView("prompt", prompt)] if isinstance(prompt, str) else []
    shared = 0
    while shared < min(len(messages), len(previous)) and messages[shared] == previous[shared]:
        shared += 1
    added = messages[shared:]
    # The reply this call follows comes back as an assistant message: its tokens are shown above,
    # but a tool call in it is what the tool result answers, so that one stays.
    if (
        previous
        and added
        and isinstance(added[0], dict)
        and added[0].get("role") == "assistant"
        and not added[0].get("tool_calls")
    ):
        added = added[1:]
    return [_message(m) for m in added if isinstance(m, dict)]


def _message(message: dict[str, object]) -> MessageView:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", f"[{p.get('type', 'part')}]")) if isinstance(p, dict) else str(p)
                            for p in content)  # fmt: skip
    role = str(message.get("role", ""))
    name = str(message.get("name") or message.get("tool_call_id") or "")
    if role == "assistant" and message.get("tool_calls"):
        content = (
            f"{content or ''}\n{json.dumps(message['tool_calls'], ensure_ascii=False)}".strip()
        )
    return MessageView(role, "" if content is None else str(content), name)
