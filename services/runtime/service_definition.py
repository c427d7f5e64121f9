"""What a service hands the `parity` CLI: its name, config class and gRPC bindings."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from parity.services.runtime.allocator import keep_freed_memory
from parity.services.runtime.config import ServerConfig, add_config_arguments, config_from_args
from parity.services.runtime.errors import ParityError
from parity.services.runtime.server import GrpcServer, ServiceBinding
from parity.services.runtime.structured_logging import configure_logging


def _run(main: Coroutine[Any, Any, None]) -> None:
    """uvloop where it is installed (the ingest extra brings it): the HTTP hot path
    and grpc.aio both run measurably faster on it."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


@dataclass(frozen=True)
class ServiceDefinition:
    name: str
    description: str
    config_cls: type[ServerConfig]
    build_bindings: Callable[[Any], Sequence[ServiceBinding]]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config_arguments(parser, self.config_cls, self.name)

    def serve(self, args: argparse.Namespace) -> int:
        """Run the service in the foreground until SIGTERM or SIGINT. Returns the exit code."""
        try:
            config = config_from_args(self.config_cls, args, self.name)
        except ParityError as error:
            configure_logging()
            structlog.get_logger(__name__).error(
                "invalid_config", service=self.name, error=str(error)
            )
            return 2
        configure_logging(config.log_level, config.log_format, service=self.name)  # type: ignore[arg-type]
        keep_freed_memory()
        try:
            server = GrpcServer(config, self.build_bindings(config))
            _run(server.serve_until_signalled())
        except ParityError as error:
            structlog.get_logger(__name__).error(
                "service_failed", service=self.name, error=str(error)
            )
            return 1
        return 0
