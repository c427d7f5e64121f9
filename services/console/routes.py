"""The console's pages: each parses its request, asks a view model, renders a template.

A page is built and rendered on a worker thread: the typed clients block, and a
10,000-token trajectory takes tens of milliseconds to render, which the event loop
serving the live feed should not wait for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from parity.services.console.live import event, keep_alive
from parity.services.console.pages import STATIC_DIR, render
from parity.services.console.views.batches import batch_page
from parity.services.console.views.run_compare import compare_page, parse_run_ids
from parity.services.console.views.runs import list_runs, run_page
from parity.services.console.views.session_page import session_page
from parity.services.console.views.sessions import SessionFilters, list_sessions
from parity.services.console.views.versions import feedback_by_version


async def home(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=302)


async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


async def runs(request: Request) -> Response:
    state = request.app.state
    token = request.query_params.get("page", "")

    def build() -> Response:
        listing = list_runs(state.services, state.config.page_size, token)
        return render(request, "runs.html", listing=listing)

    return await run_in_threadpool(build)


async def compare(request: Request) -> Response:
    try:
        run_ids = parse_run_ids(request.query_params.getlist("run"))
    except ValueError as error:
        raise HTTPException(400, str(error)) from None
    services = request.app.state.services
    return await run_in_threadpool(
        lambda: render(request, "compare.html", page=compare_page(services, run_ids))
    )


async def run(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    return await run_in_threadpool(
        lambda: render(request, "run.html", page=run_page(request.app.state.services, run_id))
    )


async def step(request: Request) -> Response:
    run_id, number = request.path_params["run_id"], request.path_params["step"]
    services = request.app.state.services
    return await run_in_threadpool(
        lambda: render(request, "batch.html", page=batch_page(services, run_id, number))
    )


async def sessions(request: Request) -> Response:
    state = request.app.state
    filters, problems = SessionFilters.parse(request.query_params)
    token = request.query_params.get("page", "")

    def build() -> Response:
        listing = list_sessions(state.services, filters, state.config.page_size, token)
        return render(
            request,
            "sessions.html",
            filters=filters,
            problems=problems,
            listing=listing,
            first_page=not token,
        )

    return await run_in_threadpool(build)


async def versions(request: Request) -> Response:
    state = request.app.state
    filters, problems = SessionFilters.parse(request.query_params)

    def build() -> Response:
        page = feedback_by_version(state.services, filters)
        return render(request, "versions.html", filters=filters, problems=problems, page=page)

    return await run_in_threadpool(build)


async def session(request: Request) -> Response:
    state = request.app.state
    session_id = request.path_params["session_id"]
    # Opened from a step's batch: that step's teacher scores, if it had a teacher.
    run_id, step = request.query_params.get("run", ""), request.query_params.get("step", "")
    if step and not (step.isdecimal() and int(step) < 2**31):
        raise HTTPException(400, f"step must be a step number, got {step!r}")

    def build() -> Response:
        page = session_page(
            state.services, session_id, state.config.tokenizer, run_id, int(step or 0)
        )
        return render(request, "session.html", page=page)

    return await run_in_threadpool(build)


async def live_calls(request: Request) -> Response:
    """Server-sent events: `calls` when sessions got new calls, `down` while the store is unreachable."""
    state = request.app.state

    async def stream() -> AsyncIterator[str]:
        yield keep_alive()
        async for change in state.live.changes(state.stopping):
            if await request.is_disconnected():
                return
            yield keep_alive() if change is None else event(change)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


ROUTES = [
    Route("/", home),
    Route("/healthz", health),
    Route("/runs", runs),
    # Before /runs/{run_id}, which would take "compare" for a run id.
    Route("/runs/compare", compare),
    Route("/runs/{run_id}", run),
    Route("/runs/{run_id}/steps/{step:int}", step),
    Route("/sessions", sessions),
    Route("/events", live_calls),
    Route("/versions", versions),
    Route("/sessions/{session_id:path}", session),
    Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
]
