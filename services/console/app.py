"""The console's web application: routes, the token check, security headers, error pages
and one log line per request."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parity.services.console.auth import BearerToken
from parity.services.console.live import LiveCalls
from parity.services.console.pages import error_page
from parity.services.console.routes import ROUTES
from parity.services.console.settings import ConsoleConfig
from parity.services.console.upstream import Missing, Refused, ServiceDown, Services

log = structlog.get_logger(__name__)

# Scripts and styles only from the console itself: even markup that escaped escaping could not run.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                                 b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]  # fmt: skip


class RequestLog:
    """One line per request, and the security headers on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def respond(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, respond)
        finally:
            if scope["path"] not in ("/healthz", "/events") and not scope["path"].startswith(
                "/static/"
            ):
                log.info("request", method=scope["method"], path=scope["path"], status=status,
                         ms=round((time.perf_counter() - started) * 1e3, 1))  # fmt: skip


async def _missing(request: Request, error: Exception) -> Response:
    return error_page(request, 404, "Not found", str(error))


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if error.status_code == 404:
        return error_page(request, 404, "Not found", f"no page at {request.url.path}")
    return error_page(request, error.status_code, "Request refused", str(error.detail))


async def _down(request: Request, error: Exception) -> Response:
    log.warning("service_down", path=request.url.path, error=str(error))
    return error_page(request, 503, "A service is unavailable", str(error))


async def _refused(request: Request, error: Exception) -> Response:
    return error_page(request, 400, "Request refused", str(error))


async def _unauthorized(request: Request) -> Response:
    return error_page(request, 401, "Token required",
                      "This console needs its token: open any page with ?token=TOKEN, or send Authorization: Bearer TOKEN.")  # fmt: skip


def create_app(config: ConsoleConfig, services: Services | None = None) -> Starlette:
    services = services or Services.connect(config)
    live = LiveCalls(services)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.stopping = asyncio.Event()
        yield
        live.stop()

    middleware = [Middleware(RequestLog)]
    if config.token:
        middleware.append(Middleware(BearerToken, token=config.token, refuse=_unauthorized))
    app = Starlette(
        routes=ROUTES, middleware=middleware, lifespan=lifespan,
        exception_handlers={Missing: _missing, HTTPException: _http_error, ServiceDown: _down, Refused: _refused},
    )  # fmt: skip
    app.state.config = config
    app.state.services = services
    app.state.live = live
    return app
