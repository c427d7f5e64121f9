"""Sessions and trajectories: which episode, and which part of it, a call belongs to.

The active session lives in a context variable, so it follows the code that opened
it: into nested sessions, across `await`, into tasks created inside it, and into
threads started with a copied context (the agent engine does this for sync agents).
Calls carry it to ingest through the base URL, so nothing inside an agent framework
needs to know about Parity. A process started for one session (an agent command of
`parity train`) finds it in `$PARITY_SESSION`, the session's slug.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from parity.config import current_config
from parity.core import session_slug
from parity.core.attribution import check_end_user_id, normalize_tags
from parity.core.ids import new_id
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import SessionRef

P = ParamSpec("P")
R = TypeVar("R")

SESSION_ENV = "PARITY_SESSION"
API_STYLES = ("openai", "anthropic")
_current: contextvars.ContextVar[SessionRef | None] = contextvars.ContextVar(
    "parity_session", default=None
)


def current_session() -> SessionRef | None:
    """The session calls made here belong to: the innermost open one, else the one named by
    $PARITY_SESSION, else None."""
    ref = _current.get()
    if ref is None and os.environ.get(SESSION_ENV):
        return session_slug.decode(os.environ[SESSION_ENV])
    return ref


def session_url(ingest_url: str | None = None, *, api: str = "openai") -> str:
    """The current session's base URL, for frameworks and CLIs configured by URL.

    `api="openai"` (…/v1): the OpenAI SDKs, LangChain, the OpenAI Agents SDK, litellm
    clients, Codex CLI. `api="anthropic"` (no /v1: Anthropic clients add /v1/messages
    themselves): the anthropic SDK, the Claude Agent SDK, Claude Code. Outside a session
    it is ingest's plain root (calls land in the unassigned session)."""
    if api not in API_STYLES:
        raise ValueError(f"api must be one of {', '.join(API_STYLES)}, got {api!r}")
    root = (ingest_url or current_config().ingest_url).rstrip("/")
    ref = current_session()
    base = f"{root}/sessions/{session_slug.encode(ref)}" if ref else root
    return f"{base}/v1" if api == "openai" else base


class _Scope:
    """A `with` block (or `async with`) whose calls belong to the SessionRef it makes when entered."""

    _token: contextvars.Token[SessionRef | None] | None

    def _scoped_ref(self) -> SessionRef:
        raise NotImplementedError

    def _open(self) -> SessionRef:
        ref = self._scoped_ref()
        self._token = _current.set(ref)
        return ref

    def _close(self) -> None:
        assert self._token is not None, f"{type(self).__name__} exited without being entered"
        _current.reset(self._token)
        self._token = None

    def __enter__(self) -> SessionRef:
        return self._open()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._close()

    async def __aenter__(self) -> SessionRef:
        return self._open()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._close()


class session(_Scope):  # noqa: N801 - used like a function: `with parity.session(task="t1"):`
    """Open a (nested) session for the calls made inside it.

        with parity.session(task="add-2-3") as s:       # or `async with`
            client.chat.completions.create(...)

    Metadata merges with the enclosing session's; the new session records the
    enclosing one as its parent. `session_id` defaults to a fresh unique id.
    `history_mode` ("as_deployed" or "exact_history", see docs/multi-turn.md)
    overrides ingest's for the session's calls; nested sessions inherit it.
    `budget` caps the session's calls, tokens and seconds (SessionBudget);
    a nested session is held to the tighter of its own and its parent's.
    `user` is the end user a deployed agent serves and `tags` label the session
    (docs/production.md); the store indexes both, to list, train on and delete
    by. A nested session inherits its parent's user and adds to its tags.
    """

    def __init__(
        self, session_id: str | None = None, *, trajectory: str | None = None, history_mode: str | None = None,
        budget: SessionBudget | None = None, user: str | None = None, tags: Iterable[str] = (), **metadata: str,
    ) -> None:  # fmt: skip
        if history_mode is not None and history_mode not in session_slug.HISTORY_MODES:
            raise ValueError(
                f"history_mode must be one of {', '.join(session_slug.HISTORY_MODES)}, got {history_mode!r}"
            )
        self.session_id = session_id
        self.trajectory = trajectory
        self.history_mode = history_mode
        self.budget = budget
        self.user = check_end_user_id(user, "user") if user is not None else None
        self.tags = normalize_tags(tags)
        self.metadata = {key: str(value) for key, value in metadata.items()}
        self.ref: SessionRef | None = None
        self._token = None

    def _scoped_ref(self) -> SessionRef:
        parent = current_session()
        self.ref = SessionRef(
            session_id=self.session_id or new_id(),
            parent_session_ids=(*parent.parent_session_ids, parent.session_id) if parent else (),
            trajectory_name=self.trajectory if self.trajectory is not None else "",
            metadata={**(parent.metadata if parent else {}), **self.metadata},
            history_mode=self.history_mode
            if self.history_mode is not None
            else (parent.history_mode if parent else ""),
            budget=self.budget.tightest(parent.budget if parent else None)
            if self.budget
            else (parent.budget if parent else None),
            end_user_id=self.user
            if self.user is not None
            else (parent.end_user_id if parent else ""),
            tags=normalize_tags((*(parent.tags if parent else ()), *self.tags)),
        )
        return self.ref


class thread(_Scope):  # noqa: N801 - used like a function: `with parity.thread("researcher"):`
    """Name the thread of the current session that the calls made inside belong to: an orchestrator's, or one
    of the subagents it runs in the same episode.

        with parity.thread("researcher"):
            client.chat.completions.create(...)

    The session stays the same (its rollout, rewards and group); only the calls' thread changes. The
    assembler merges each thread's calls on their own, and a `parity.reward()` made inside scores that
    thread's samples only. Without it the assembler finds threads from the token ids alone; a framework
    that cannot run code around a subagent's calls can send the `X-Parity-Thread` header instead.
    """

    def __init__(self, name: str) -> None:
        if not name:
            raise ValueError("a thread needs a name")
        self.name = name
        self._token = None

    def _scoped_ref(self) -> SessionRef:
        parent = current_session()
        if parent is None:
            raise RuntimeError(
                "parity.thread() needs an active session: open it inside parity.session() or @trajectory"
            )
        ref = dataclasses.replace(parent, thread_id=self.name)
        session_slug.check(ref)
        return ref


@dataclass(frozen=True)
class TrajectoryView:
    """What a @trajectory run produced, for callers that ask for it."""

    session_id: str
    name: str
    metadata: Mapping[str, str]


def _trajectory_ref(name: str) -> SessionRef:
    parent = current_session()
    if parent is None:
        return SessionRef(new_id(), trajectory_name=name)
    return SessionRef(
        parent.session_id,
        parent.parent_session_ids,
        name,
        parent.metadata,
        parent.history_mode,
        parent.budget,
    )


class _Trajectory:
    """The wrapper @trajectory returns: call it as the function; `.with_view()` also returns the view."""

    def __init__(self, function: Callable[..., Any], name: str) -> None:
        functools.update_wrapper(self, function)
        self._function = function
        self.name = name
        self._is_async = inspect.iscoroutinefunction(function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_async:
            return self._run_async(args, kwargs, with_view=False)
        return self._run_sync(args, kwargs, with_view=False)

    def with_view(self, *args: Any, **kwargs: Any) -> Any:
        """Run and return `(result, TrajectoryView)`; awaitable for async functions."""
        if self._is_async:
            return self._run_async(args, kwargs, with_view=True)
        return self._run_sync(args, kwargs, with_view=True)

    def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any], with_view: bool) -> Any:
        ref = _trajectory_ref(self.name)
        token = _current.set(ref)
        try:
            result = self._function(*args, **kwargs)
        finally:
            _current.reset(token)
        return (
            (result, TrajectoryView(ref.session_id, self.name, ref.metadata))
            if with_view
            else result
        )

    async def _run_async(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], with_view: bool
    ) -> Any:
        ref = _trajectory_ref(self.name)
        token = _current.set(ref)
        try:
            result = await self._function(*args, **kwargs)
        finally:
            _current.reset(token)
        return (
            (result, TrajectoryView(ref.session_id, self.name, ref.metadata))
            if with_view
            else result
        )

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Methods: bind like a function would.
        return self if instance is None else functools.partial(self.__call__, instance)


@overload
def trajectory(function: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def trajectory(*, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def trajectory(function: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
    """Group the calls a function makes into a named trajectory of the current session.

        @parity.trajectory(name="solver")
        async def solve(task): ...

    The function returns what it always did; `solve.with_view(task)` also returns the
    TrajectoryView. Outside any session a fresh one is opened for the trajectory.
    """

    def decorate(inner: Callable[..., Any]) -> Any:
        return _Trajectory(inner, name or inner.__name__)

    return decorate(function) if function is not None else decorate
