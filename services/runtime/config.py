"""Service configuration: typed dataclasses filled from flags, then PARITY_* variables, then defaults.

Each field becomes a flag `--field-name` and an environment variable
`PARITY_<SERVICE>_<FIELD_NAME>`; a flag wins over the variable. Help text lives in
the field's metadata, so `parity <service> serve --help` documents every setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from parity.core.settings_fields import setting
from parity.services.runtime.auth import TokenTable, is_loopback
from parity.services.runtime.errors import InvalidArgument

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")

ConfigT = TypeVar("ConfigT", bound="ListenerConfig")


@dataclass
class ListenerConfig:
    """Settings every service shares, gRPC or HTTP (the console)."""

    host: str = setting("127.0.0.1", "address to listen on; 0.0.0.0 for all interfaces")
    port: int = setting(0, "port; 0 picks a free one")
    log_level: str = setting("info", "minimum log level", LOG_LEVELS)
    log_format: str = setting(
        "auto", "json, console, or auto (json unless on a terminal)", LOG_FORMATS
    )
    shutdown_grace_s: float = setting(10.0, "seconds in-flight requests get to finish on shutdown")

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidArgument(f"port must be in 0..65535, got {self.port}")
        if self.log_level not in LOG_LEVELS:
            raise InvalidArgument(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")
        if self.log_format not in LOG_FORMATS:
            raise InvalidArgument(
                f"log_format must be one of {LOG_FORMATS}, got {self.log_format!r}"
            )
        if self.shutdown_grace_s < 0:
            raise InvalidArgument(f"shutdown_grace_s must be >= 0, got {self.shutdown_grace_s}")


@dataclass
class ServerConfig(ListenerConfig):
    """Settings every gRPC service shares."""

    port: int = setting(0, "gRPC port; 0 picks a free one")
    # Token arrays of a 1,000-call WriteCalls batch run to a few MB; 64 MB leaves
    # room for long contexts while still refusing runaway messages.
    max_message_mb: int = setting(64, "largest gRPC message accepted or sent, in MiB")
    auth_tokens_file: str = setting(
        "", "file of `ROLE TOKEN` lines (roles read, agent, service, admin) that callers present as "
        "authorization: Bearer TOKEN; empty: no authentication, allowed on loopback only (see --insecure)"
    )  # fmt: skip
    insecure: bool = setting(
        False, "serve a non-loopback address without authentication (a trusted private network)"
    )
    tls_cert_file: str = setting(
        "", "PEM certificate chain to serve TLS with (with --tls-key-file); empty: plaintext"
    )
    tls_key_file: str = setting("", "PEM private key of --tls-cert-file")
    tls_client_ca_file: str = setting(
        "", "PEM CA bundle; set: clients must present a certificate it signed (mTLS)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.max_message_mb <= 2047:
            raise InvalidArgument(f"max_message_mb must be in 1..2047, got {self.max_message_mb}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InvalidArgument("tls_cert_file and tls_key_file go together: set both or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise InvalidArgument(
                "tls_client_ca_file needs TLS: set tls_cert_file and tls_key_file too"
            )
        if not self.auth_tokens_file and not self.insecure and not is_loopback(self.host):
            raise InvalidArgument(
                f"listening on {self.host} with no authentication: set --auth-tokens-file (or its environment "
                "variable) to a file of `ROLE TOKEN` lines, or --insecure to serve a trusted private network anyway"
            )

    def token_table(self) -> TokenTable | None:
        return TokenTable.read(self.auth_tokens_file) if self.auth_tokens_file else None

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024


def env_var_name(service: str, field_name: str) -> str:
    return f"PARITY_{service.upper()}_{field_name.upper()}"


def add_config_arguments(
    parser: argparse.ArgumentParser, config_cls: type[ListenerConfig], service: str
) -> None:
    """Add one flag per config field; defaults stay None so the environment can fill them."""
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        help_text = f"{f.metadata.get('help', '')} (env {env_var_name(service, f.name)}; default {default!r})"
        if hints[f.name] is bool:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif hints[f.name] == list[str]:
            parser.add_argument(
                flag,
                action="append",
                default=None,
                metavar="VALUE",
                help=f"{help_text}; repeatable",
            )
        else:
            parser.add_argument(
                flag,
                type=hints[f.name],
                default=None,
                choices=f.metadata.get("choices"),
                help=help_text,
            )


def config_from_args(config_cls: type[ConfigT], args: argparse.Namespace, service: str) -> ConfigT:
    """Build the config: flag, else PARITY_<SERVICE>_<FIELD>, else the field's default."""
    hints = typing.get_type_hints(config_cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        flag_value = getattr(args, f.name, None)
        if flag_value is not None:
            values[f.name] = flag_value
            continue
        raw = os.environ.get(env_var_name(service, f.name))
        if raw is not None:
            values[f.name] = _parse_env(raw, hints[f.name], env_var_name(service, f.name))
    return config_cls(**values)


def _parse_env(raw: str, kind: type, name: str) -> Any:
    if kind == list[str]:
        # Comma-separated, as a list in one variable.
        return [part.strip() for part in raw.split(",") if part.strip()]
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise InvalidArgument(f"{name} must be true or false, got {raw!r}")
    try:
        return kind(raw)
    except ValueError:
        raise InvalidArgument(f"{name} must be a {kind.__name__}, got {raw!r}") from None
