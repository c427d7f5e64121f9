"""structlog set up once per process, with standard-library logs bridged in.

JSON lines when stderr is not a terminal (services under a supervisor, CI), colored
console output when it is. vLLM, grpc and verl log through the standard library;
they go through the same processors, so every line has the same shape.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]

_SHARED_PROCESSORS: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


def configure_logging(
    level: str = "info", log_format: LogFormat = "auto", **process_fields: str
) -> None:
    """Configure structlog and the standard-library root logger. Safe to call again.

    `process_fields` (e.g. service="store") go on every line, including those of
    RPCs whose per-request context has been cleared.
    """
    use_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared = [*_SHARED_PROCESSORS, _add_fields(process_fields)]
    structlog.configure(
        processors=[
            # First, so a disabled level costs one check: the access log's info line on
            # every request is otherwise stamped and processed before being dropped.
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at info; health polling would drown the log.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))


def _add_fields(fields: dict[str, str]) -> structlog.types.Processor:
    def add(
        _logger: object, _method: str, event_dict: structlog.types.EventDict
    ) -> structlog.types.EventDict:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
        return event_dict

    return add
