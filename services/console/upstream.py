"""The services the console reads, over their typed gRPC clients and nothing else.

A page needs to say which service failed and how: a service that is down or too slow
becomes a banner (`ServiceDown`), an id it does not know a 404 (`Missing`), a request
it refuses (a page token from another query) a 400 (`Refused`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from parity.clients import AssemblerClient, RPCError, StoreClient, TrainerClient
from parity.services.console.settings import ConsoleConfig

Request = TypeVar("Request")
Response = TypeVar("Response")
Client = TypeVar("Client")

_DOWN = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL,
         grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.RESOURCE_EXHAUSTED}  # fmt: skip


class ServiceDown(Exception):
    def __init__(self, service: str, address: str, detail: str) -> None:
        super().__init__(f"the {service} at {address} is unavailable: {detail}")
        self.service = service
        self.address = address
        self.detail = detail


class Missing(Exception):
    """A run, step or session the services do not know."""


class Refused(Exception):
    """The service refused the request as malformed."""


@dataclass
class Upstream(Generic[Client]):
    name: str
    address: str
    client: Client

    def read(self, call: Callable[[Request], Response], request: Request) -> Response:
        try:
            return call(request)
        except RPCError as error:
            raise self.failure(error) from None

    def read_all(self, call: Callable[[Request], Any], request: Request, field: str) -> list[Any]:
        """Every item of a list RPC: `field` of each page, asking again with its next_page_token until none."""
        found: list[Any] = []
        while True:
            response = self.read(call, request)
            found += getattr(response, field)
            if not response.next_page_token:
                return found
            request.page_token = response.next_page_token  # type: ignore[attr-defined]

    def failure(self, error: RPCError) -> Exception:
        if error.code == grpc.StatusCode.NOT_FOUND:
            return Missing(error.message)
        if error.code in _DOWN:
            return ServiceDown(self.name, self.address, f"{error.code.name}: {error.message}")
        return Refused(error.message)


@dataclass
class Services:
    store: Upstream[StoreClient]
    assembler: Upstream[AssemblerClient]
    trainer: Upstream[TrainerClient]

    @classmethod
    def connect(cls, config: ConsoleConfig) -> Services:
        # One quick retry: a page waits for a restarting service a moment, not the clients' default seconds.
        options = {"timeout_s": config.rpc_timeout_s, "retries": 1, "backoff_s": 0.05}
        return cls(
            Upstream("store", config.store_address, StoreClient(config.store_address, **options)),
            Upstream(
                "assembler",
                config.assembler_address,
                AssemblerClient(config.assembler_address, **options),
            ),
            Upstream(
                "trainer", config.trainer_address, TrainerClient(config.trainer_address, **options)
            ),
        )
