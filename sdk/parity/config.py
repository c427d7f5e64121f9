"""Where the SDK finds Parity: set in code with `parity.configure()` or by environment.

PARITY_INGEST_URL        ingest's HTTP root, e.g. http://127.0.0.1:8000
PARITY_ASSEMBLER_ADDRESS assembler gRPC address, e.g. 127.0.0.1:50053
PARITY_STORE_ADDRESS     token store gRPC address
PARITY_API_KEY           sent to ingest as the bearer token, if it requires one (an agent-role token)
PARITY_TOKEN             sent to the gRPC services (PARITY_TOKEN_FILE, TLS: see parity.clients.transport)
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, replace

from parity.clients import base, transport


@dataclass(frozen=True)
class ParityConfig:
    ingest_url: str = "http://127.0.0.1:8000"
    assembler_address: str = "127.0.0.1:50053"
    store_address: str = "127.0.0.1:50051"
    api_key: str = "unused"
    # Deadline for each gRPC call the SDK makes, in seconds.
    rpc_timeout_s: float = base.DEFAULT_TIMEOUT_S

    @classmethod
    def from_environment(cls) -> ParityConfig:
        defaults = cls()
        return cls(
            ingest_url=os.environ.get("PARITY_INGEST_URL", defaults.ingest_url).rstrip("/"),
            assembler_address=os.environ.get(
                "PARITY_ASSEMBLER_ADDRESS", defaults.assembler_address
            ),
            store_address=os.environ.get("PARITY_STORE_ADDRESS", defaults.store_address),
            api_key=os.environ.get("PARITY_API_KEY", defaults.api_key),
        )


_config = ParityConfig.from_environment()


def configure(**settings: object) -> ParityConfig:
    """Override settings for this process, e.g. `parity.configure(ingest_url="http://gpu-box:8000")`.
    `token=` sets the bearer token every gRPC call sends from now on."""
    global _config
    if "token" in settings:
        token = str(settings.pop("token"))
        transport.set_process_security(
            dataclasses.replace(transport.process_security(), token=token)
        )
    unknown = set(settings) - set(ParityConfig.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown Parity settings: {sorted(unknown)}")
    if "ingest_url" in settings:
        settings["ingest_url"] = str(settings["ingest_url"]).rstrip("/")
    _config = replace(_config, **settings)  # type: ignore[arg-type]
    base.set_default_timeout_s(_config.rpc_timeout_s)
    return _config


def current_config() -> ParityConfig:
    return _config
