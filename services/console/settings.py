"""`parity console serve` settings: a flag and a PARITY_CONSOLE_* variable each."""

from __future__ import annotations

from dataclasses import dataclass

from parity.core.settings_fields import setting
from parity.services.runtime.auth import is_loopback
from parity.services.runtime.config import ListenerConfig
from parity.services.runtime.errors import InvalidArgument

DEFAULT_PORT = 8200
TOKEN_ENV = "PARITY_CONSOLE_TOKEN"


@dataclass
class ConsoleConfig(ListenerConfig):
    port: int = setting(DEFAULT_PORT, "HTTP port; 0 picks a free one")
    store_address: str = setting(
        "127.0.0.1:50051", "the token store's gRPC address (sessions, calls, rewards)"
    )
    assembler_address: str = setting(
        "127.0.0.1:50053", "the assembler's gRPC address (trajectories, loss masks)"
    )
    trainer_address: str = setting(
        "127.0.0.1:50054", "the trainer's gRPC address (runs, metrics, batches)"
    )
    token: str = setting(
        "",
        f"bearer token every request must carry (Authorization header, or ?token= once in a browser); "
        f"required when binding to anything but loopback. Prefer ${TOKEN_ENV}: a flag shows in `ps`",
    )
    tokenizer: str = setting(
        "",
        "model folder whose tokenizer decodes sessions of no run, or whose run's model is not readable here",
    )
    rpc_timeout_s: float = setting(
        5.0, "deadline of each read from a service; a service past it is shown as down"
    )
    page_size: int = setting(50, "rows per page of sessions and runs")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.token and not is_loopback(self.host):
            raise InvalidArgument(
                f"the console would listen on {self.host!r} without a token: anyone who reaches it reads every "
                f"agent's conversation. Set ${TOKEN_ENV} (or --token), or bind to 127.0.0.1"
            )
        if self.rpc_timeout_s <= 0:
            raise InvalidArgument(f"rpc_timeout_s must be > 0, got {self.rpc_timeout_s}")
        if not 1 <= self.page_size <= 1000:
            raise InvalidArgument(f"page_size must be in 1..1000, got {self.page_size}")
