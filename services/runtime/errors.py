"""Domain errors. Services raise these; one interceptor turns them into gRPC statuses.

Domain code never imports grpc to report a failure: it raises the error that says
what went wrong, and `parity.services.runtime.interceptor` picks the status code.
"""

from __future__ import annotations

import grpc


class ParityError(Exception):
    """Base of every error a service reports to its caller. The message is shown as is."""

    status_code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(ParityError):
    """The request is malformed or out of range."""

    status_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ParityError):
    """A named resource (call, session, checkpoint...) does not exist."""

    status_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ParityError):
    """A create collided with an existing resource that differs from the request."""

    status_code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ParityError):
    """The system is not in a state where the request can run (e.g. a run is active)."""

    status_code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ParityError):
    """A dependency is down or the service is not ready yet; the caller may retry."""

    status_code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(ParityError):
    """The request lacks valid credentials."""

    status_code = grpc.StatusCode.UNAUTHENTICATED


class DeadlineExceeded(ParityError):
    """The work did not finish within the time the request allowed."""

    status_code = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhausted(ParityError):
    """A limit was hit (batch size, queue depth); the message names it."""

    status_code = grpc.StatusCode.RESOURCE_EXHAUSTED
