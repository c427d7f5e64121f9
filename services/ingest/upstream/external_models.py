"""Models that are not being trained (a judge, a hosted planner), routed through LiteLLM.

Configured with LiteLLM's own `model_list` format (the proxy's config.yaml), so any
provider LiteLLM supports works. These calls are captured as CALL_KIND_EXTERNAL:
kept for the record, never trained on. LiteLLM is imported only when such a model
is configured; the policy path never touches it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from functools import partial
from pathlib import Path
from typing import Any

import structlog
import yaml

from parity.services.ingest import openai_errors
from parity.services.ingest.capture.call_capture import CallCapture
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.recorder import COMPLETIONS, CaptureRequest
from parity.services.ingest.replies import DISCONNECTED, EXTERNAL, SUCCEEDED, UPSTREAM_ERROR
from parity.services.ingest.upstream.chat_calls import (
    ChatCall,
    Forwarded,
    StreamFailed,
    render_batches,
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

    async def forward(self, call: ChatCall, sink: CaptureSink) -> Forwarded:
        router = self._litellm_router()
        body = dict(call.body)
        body.pop("metadata", None)
        method = router.atext_completion if call.endpoint == COMPLETIONS else router.acompletion
        request = CaptureRequest(
            call.endpoint, call.body, call.raw_request, call.session, call.metadata
        )
        capture = CallCapture(
            request, sink, model=call.model, served_model=call.served_model, policy_version=0, kind=EXTERNAL,
            started_at=call.started_at,
        )  # fmt: skip
        capture.upstream("litellm", 1)
        try:
            result = await method(**body)
        except Exception as error:  # noqa: BLE001 - any provider failure is the upstream's
            failure = openai_errors.bad_gateway(f"external model {body['model']!r} failed: {error}")
            await capture.finish(UPSTREAM_ERROR, failure.message)
            raise failure from None
        if not body.get("stream"):
            response = result.model_dump()
            capture.first_byte()
            capture.add_response(response)
            await capture.finish(SUCCEEDED)
            return Forwarded(capture, response=response)
        return Forwarded(
            capture, stream=partial(render_batches, _relay(result, capture, body["model"]))
        )


async def _relay(
    result: Any, capture: CallCapture, model: str
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """As the policy's stream: closed before its end, it records the call on the way out."""
    outcome, error_message = DISCONNECTED, ""
    ran_to_end = False
    try:
        async for chunk in result:
            data = chunk.model_dump()
            capture.first_byte()
            capture.add_chunk(data)
            yield [data]
        outcome = SUCCEEDED
    except Exception as error:  # noqa: BLE001 - any provider failure is the upstream's
        outcome, error_message = UPSTREAM_ERROR, f"external model {model!r} failed: {error}"
    finally:
        if outcome == DISCONNECTED:
            capture.finish_nowait(outcome, error_message)
        else:
            ran_to_end = True
    if ran_to_end:
        await capture.finish(outcome, error_message)
    if outcome != SUCCEEDED:
        raise StreamFailed(error_message)
