"""`parity console serve`: the web console, served by uvicorn until SIGTERM or SIGINT.

It reads the store, the assembler and the trainer over their gRPC APIs only, and writes
nothing anywhere: any number of consoles may watch one deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from types import FrameType

import structlog
import uvicorn
from starlette.applications import Starlette

from parity.services.console.app import create_app
from parity.services.console.settings import ConsoleConfig
from parity.services.runtime.config import add_config_arguments, config_from_args
from parity.services.runtime.errors import ParityError
from parity.services.runtime.structured_logging import configure_logging

SERVICE = "console"


class ConsoleServer(uvicorn.Server):
    """Ends the live feeds at the first signal: left open, they would hold the shutdown for its whole grace."""

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        stopping: asyncio.Event | None = getattr(self.app.state, "stopping", None)
        loop = getattr(self, "_loop", None)
        if stopping is not None and loop is not None:
            loop.call_soon_threadsafe(stopping.set)
        super().handle_exit(sig, frame)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parity console serve", description=__doc__.splitlines()[0]
    )
    add_config_arguments(parser, ConsoleConfig, SERVICE)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(ConsoleConfig, args, SERVICE)
    except ParityError as error:
        configure_logging()
        structlog.get_logger(__name__).error("invalid_config", service=SERVICE, error=str(error))
        return 2
    configure_logging(config.log_level, config.log_format, service=SERVICE)  # type: ignore[arg-type]
    app = create_app(config)
    server = ConsoleServer(uvicorn.Config(
        app, host=config.host, port=config.port, log_config=None, access_log=False,
        # uvicorn annotates an int, but hands it to asyncio.wait_for, which takes any number of seconds.
        timeout_graceful_shutdown=config.shutdown_grace_s,  # type: ignore[arg-type]
        lifespan="on",
    ), app)  # fmt: skip
    structlog.get_logger(__name__).info("console_listening", url=f"http://{config.host}:{config.port}",
                                        store=config.store_address, assembler=config.assembler_address,
                                        trainer=config.trainer_address, token_required=bool(config.token))  # fmt: skip
    server.run()
    return 0
