"""The one interceptor that maps domain errors to gRPC statuses and logs each RPC.

Every RPC gets a fresh structlog context bound with `rpc_method`, and ends with one
summary line carrying its status code and duration. Tracebacks stay in the server
log; the caller sees a status code and a message that says what went wrong.

A request that does not parse as its message type is the caller's fault, so it is
INVALID_ARGUMENT here; left to grpc it would be UNKNOWN (a unary request, parsed
before any handler runs) or INTERNAL (a message read from a request stream).
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from parity.services.runtime.errors import InvalidArgument, ParityError

log = structlog.get_logger(__name__)

# Health probes and reflection would drown the access log; they log at debug.
_QUIET_PREFIXES = ("/grpc.health.", "/grpc.reflection.")


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        parse = handler.request_deserializer
        serialize = handler.response_serializer
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary_response(_refusing_undecodable(handler.unary_unary), method),
                _marking_undecodable(parse), serialize,
            )  # fmt: skip
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary_response(handler.stream_unary, method),
                _raising_on_undecodable(parse),
                serialize,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream_response(_refusing_undecodable(handler.unary_stream), method),
                _marking_undecodable(parse), serialize,
            )  # fmt: skip
        # A handler carries exactly one of the four behaviours.
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            _wrap_stream_response(handler.stream_stream, method),
            _raising_on_undecodable(parse),
            serialize,
        )


Deserializer = Callable[[bytes], Any]


class _Undecodable:
    """Stands in for a single request message that did not parse. grpc parses a unary
    request before any handler runs and answers UNKNOWN if that raises, so the parse
    hands this marker to the wrapped handler, which refuses it with the error."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgument) -> None:
        self.error = error


def _decode_error(parse: Deserializer, error: Exception) -> InvalidArgument:
    message_type = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
    if message_type is None:
        return InvalidArgument(f"the request could not be decoded: {error}")
    name = message_type.full_name
    # protobuf's text names the type too; say it once.
    reason = str(error).removeprefix(f"Error parsing message with type '{name}'").lstrip(": ")
    return InvalidArgument(
        f"the request could not be decoded as {name}: {reason or 'not its wire format'}"
    )


def _marking_undecodable(parse: Deserializer | None) -> Deserializer | None:
    if parse is None:
        return None

    def parse_or_mark(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as error:
            return _Undecodable(_decode_error(parse, error))

    return parse_or_mark


def _raising_on_undecodable(parse: Deserializer | None) -> Deserializer | None:
    """Messages of a request stream are parsed inside the handler, as it reads them
    (`async for` or `context.read()`): raising there ends the handler with the domain
    error, which the wrapper around it turns into INVALID_ARGUMENT."""
    if parse is None:
        return None

    def parse_or_raise(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as error:
            raise _decode_error(parse, error) from None

    return parse_or_raise


def _refusing_undecodable(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """Raise the marker's error in place of calling the handler: inside the wrapper, so
    the refusal gets the same abort and summary line as any other."""

    def refuse_or_call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            raise request.error
        return behavior(request, context)

    return refuse_or_call


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
    async def wrapper(
        request_or_iterator: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
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
