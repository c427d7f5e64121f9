"""The one error every Parity client raises."""

from __future__ import annotations

import grpc


class RPCError(Exception):
    """A Parity service answered with an error status, or could not be reached."""

    def __init__(self, code: grpc.StatusCode, message: str, method: str = "") -> None:
        super().__init__(
            f"{method}: {code.name}: {message}" if method else f"{code.name}: {message}"
        )
        self.code = code
        self.message = message
        self.method = method

    @classmethod
    def from_grpc(cls, error: grpc.RpcError, method: str) -> RPCError:
        return cls(error.code(), error.details() or "", method)
