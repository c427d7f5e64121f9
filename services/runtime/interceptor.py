"""The one interceptor that maps domain errors to gRPC statuses and logs each RPC.

Every RPC gets a fresh structlog context bound with `rpc_method`, and ends with one
summary line carrying its status code and duration. Tracebacks stay in the server
log; the caller sees a status code and a message that says what went wrong.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import structlog

from parity.services.runtime.errors import ParityError

log = structlog.get_logger(__name__)

# Health probes and reflection would drown the access log; they log at debug.
_QUIET_PREFIXES = ("/grpc.health.", "/grpc.reflection.")


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if handler.unary_unary:
            return handler._replace(unary_unary=_wrap_unary_response(handler.unary_unary, method))
        if handler.stream_unary:
            return handler._replace(stream_unary=_wrap_unary_response(handler.stream_unary, method))
        if handler.unary_stream:
            return handler._replace(unary_stream=_wrap_stream_response(handler.unary_stream, method))
        return handler._replace(stream_stream=_wrap_stream_response(handler.stream_stream, method))


class _RpcOutcome:
    """Tracks one RPC's status for the summary line and turns exceptions into aborts."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.method = method
        self.context = context
        self.code = grpc.StatusCode.OK
        self.started = time.perf_counter()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(rpc_method=method)

    async def abort_for(self, error: BaseException) -> None:
        """Abort the RPC with the status that `error` stands for. Always raises."""
        if isinstance(error, grpc.aio.AbortError):
            # The handler aborted on its own; the status is already set.
            self.code = self.context.code() or grpc.StatusCode.UNKNOWN
            raise error
        if isinstance(error, ParityError):
            self.code, message = error.status_code, str(error)
        elif isinstance(error, NotImplementedError):
            self.code = grpc.StatusCode.UNIMPLEMENTED
            message = f"{self.method} is not implemented yet"
        else:
            error_id = uuid.uuid4().hex[:12]
            self.code = grpc.StatusCode.INTERNAL
            message = f"internal error (error id {error_id}; details are in the server log)"
            log.error("rpc_internal_error", error_id=error_id, exc_info=error)
        await self.context.abort(self.code, message)

    def log_summary(self) -> None:
        quiet = self.method.startswith(_QUIET_PREFIXES)
        emit = log.debug if quiet else log.info
        emit(
            "rpc",
            code=self.code.name,
            duration_ms=round((time.perf_counter() - self.started) * 1000, 3),
        )


def _wrap_unary_response(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def wrapper(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        outcome = _RpcOutcome(method, context)
        try:
            result = behavior(request_or_iterator, context)
            return await result if inspect.isawaitable(result) else result
        except Exception as error:
            await outcome.abort_for(error)
        finally:
            outcome.log_summary()

    return wrapper


def _wrap_stream_response(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def wrapper(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        outcome = _RpcOutcome(method, context)
        try:
            result = behavior(request_or_iterator, context)
            if inspect.isasyncgen(result):
                async for response in result:
                    yield response
            elif inspect.isawaitable(result):
                # A handler that writes with context.write() and returns None.
                await result
            else:
                for response in result:
                    yield response
        except Exception as error:
            await outcome.abort_for(error)
        finally:
            outcome.log_summary()

    return wrapper
