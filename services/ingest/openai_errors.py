"""Errors the HTTP API returns, in the OpenAI error shape every OpenAI client understands."""

from __future__ import annotations

import orjson


class HttpError(Exception):
    """An error answered to the agent: an HTTP status and an OpenAI-style JSON body."""

    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}}
        )


def bad_request(message: str, param: str | None = None) -> HttpError:
    return HttpError(400, message, "invalid_request_error", param)


def unauthorized(message: str) -> HttpError:
    return HttpError(401, message, "authentication_error")


def not_found(message: str, param: str | None = None) -> HttpError:
    return HttpError(404, message, "not_found_error", param)


def too_large(message: str) -> HttpError:
    return HttpError(413, message, "invalid_request_error")


def bad_gateway(message: str) -> HttpError:
    return HttpError(502, message, "upstream_error")


def unavailable(message: str) -> HttpError:
    return HttpError(503, message, "service_unavailable")


def gateway_timeout(message: str) -> HttpError:
    return HttpError(504, message, "upstream_timeout")
