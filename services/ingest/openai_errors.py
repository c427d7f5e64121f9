"""Errors the HTTP API returns: in the OpenAI error shape every OpenAI client understands, or in
Anthropic's for the Messages API."""

from __future__ import annotations

import orjson

# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors).
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    405: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
    529: "overloaded_error",
}  # fmt: skip


class HttpError(Exception):
    """An error answered to the agent: an HTTP status and an OpenAI-style JSON body."""

    def __init__(
        self, status: int, message: str, error_type: str, param: str | None = None, *, code: str | None = None
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        # OpenAI's machine-readable code where it has one (context_length_exceeded); else the status.
        self.code = code

    def body(self) -> bytes:
        code = self.code if self.code is not None else self.status
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": self.error_type,
                    "param": self.param,
                    "code": code,
                }
            }
        )

    def anthropic_body(self) -> bytes:
        return orjson.dumps({"type": "error", "error": self.anthropic_error()})

    def anthropic_error(self) -> dict[str, str]:
        """The error object of Anthropic's error shape; a named field leads the message, as Anthropic's do."""
        message = (
            f"{self.param}: {self.message}"
            if self.param and not self.message.startswith(self.param)
            else self.message
        )
        return {"type": ANTHROPIC_ERROR_TYPES.get(self.status, "api_error"), "message": message}


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
