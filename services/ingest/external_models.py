"""Models that are not being trained (a judge, a hosted planner), routed through LiteLLM.

Configured with LiteLLM's own `model_list` format (the proxy's config.yaml), so any
provider LiteLLM supports works. These calls are captured as CALL_KIND_EXTERNAL:
kept for the record, never trained on. LiteLLM is imported only when such a model
is configured; the policy path never touches it.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import orjson
import structlog
import yaml

from parity.services.ingest import openai_errors
from parity.services.ingest.capture import CHAT, CallRecorder, CaptureRequest
from parity.services.ingest.capture_sink import CaptureSink
from parity.services.ingest.replies import (
    DISCONNECTED,
    EXTERNAL,
    SUCCEEDED,
    UPSTREAM_ERROR,
    JsonReply,
    Reply,
    StreamReply,
)

log = structlog.get_logger(__name__)


class ExternalModels:
    def __init__(self, config_path: str = "") -> None:
        self.model_list: list[dict[str, Any]] = []
        self._router: Any = None
        if config_path:
            document = yaml.safe_load(Path(config_path).read_text()) or {}
            self.model_list = document.get("model_list") or []
            if not all(isinstance(m, dict) and m.get("model_name") for m in self.model_list):
                raise ValueError(f"{config_path}: every model_list entry needs a model_name")

        self._names = {entry["model_name"] for entry in self.model_list}

    def models(self) -> list[str]:
        return sorted(self._names)

    def serves(self, model: str) -> bool:
        return model in self._names

    def _litellm_router(self) -> Any:
        if self._router is None:
            # Without it, importing litellm fetches a cost map from the network.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            self._router = litellm.Router(model_list=self.model_list)
        return self._router

    async def complete(
        self, capture: CaptureRequest, sink: CaptureSink, summary: dict[str, Any], started_at: float
    ) -> Reply:
        router = self._litellm_router()
        body = dict(capture.body)
        body.pop("metadata", None)
        method = router.acompletion if capture.endpoint == CHAT else router.atext_completion
        summary["replica"] = "litellm"
        recorder = CallRecorder(capture)
        fields = {
            "model": body["model"], "policy_version": 0, "replica": "litellm", "kind": EXTERNAL,
            "started_at": started_at, "attempts": 1, "streamed": bool(body.get("stream")),
        }  # fmt: skip
        try:
            result = await method(**body)
        except Exception as error:  # noqa: BLE001 - any provider failure is the upstream's
            failure = openai_errors.bad_gateway(f"external model {body['model']!r} failed: {error}")
            call = recorder.to_call(
                first_byte_at=None, upstream_seconds=time.time() - started_at,
                outcome=UPSTREAM_ERROR, error_message=failure.message, **fields,
            )  # fmt: skip
            await sink.submit(call)
            raise failure from None
        if not body.get("stream"):
            response = result.model_dump()
            recorder.add_response(response)
            call = recorder.to_call(
                first_byte_at=time.time(), upstream_seconds=time.time() - started_at,
                outcome=SUCCEEDED, **fields,
            )  # fmt: skip
            await sink.submit(call)
            return JsonReply(200, orjson.dumps(response), summary)

        async def relay() -> AsyncGenerator[bytes, None]:
            outcome, error_message = DISCONNECTED, ""
            # As in the policy relay: closed before its end, it records the call on the way out.
            ran_to_end = False
            try:
                async for chunk in result:
                    data = chunk.model_dump()
                    recorder.add_chunk(data)
                    yield b"data: " + orjson.dumps(data) + b"\n\n"
                outcome = SUCCEEDED
                ran_to_end = True
            except Exception as error:  # noqa: BLE001 - any provider failure is the upstream's
                outcome, error_message = UPSTREAM_ERROR, f"external model {body['model']!r} failed: {error}"
                yield b"data: " + openai_errors.bad_gateway(error_message).body() + b"\n\n"
                ran_to_end = True
            finally:
                call = recorder.to_call(
                    first_byte_at=None, upstream_seconds=time.time() - started_at,
                    outcome=outcome, error_message=error_message, **fields,
                )  # fmt: skip
                if not ran_to_end:
                    sink.submit_nowait(call)
            await sink.submit(call)
            yield b"data: [DONE]\n\n"

        return StreamReply(relay(), summary)


