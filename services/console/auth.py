"""The bearer token a console bound beyond loopback requires.

API clients send `Authorization: Bearer TOKEN`. A browser cannot set that header on a
link it follows, so opening any page with `?token=TOKEN` once stores the token in an
HttpOnly, SameSite=Strict cookie and redirects to the same page without it, keeping
the token out of the address bar and the history. `/healthz` needs no token: it says
only that the console is up.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp

COOKIE = "parity_console_token"
OPEN_PATHS = frozenset({"/healthz"})


class BearerToken(BaseHTTPMiddleware):
    def __init__(self, app: ASGIApp, token: str, refuse: RequestResponseEndpoint) -> None:
        super().__init__(app)
        self.token = token
        self.refuse = refuse

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path in OPEN_PATHS:
            return await call_next(request)
        offered = request.query_params.get("token")
        if offered is not None and self._matches(offered):
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            clean = URL(str(request.url)).replace(query=urlencode(kept))
            response = RedirectResponse(
                clean.path + (f"?{clean.query}" if clean.query else ""), status_code=303
            )
            response.set_cookie(
                COOKIE,
                self.token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header[:7].lower() == "bearer " else ""
        if self._matches(bearer) or self._matches(request.cookies.get(COOKIE, "")):
            return await call_next(request)
        return await self.refuse(request)

    def _matches(self, offered: str) -> bool:
        return bool(offered) and hmac.compare_digest(offered.encode(), self.token.encode())
