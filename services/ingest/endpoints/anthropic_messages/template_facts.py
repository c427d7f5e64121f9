"""What a policy's chat template does, learned once per model by having a replica render probe conversations.

Translating another API into chat messages (the Anthropic Messages API) depends on
the template as vLLM's own translation does: a template that refuses a system message
after the first turn (Qwen's does) gets inline system messages merged into the
leading one. The replica renders the probe with `/tokenize`, which applies the
template and generates nothing.
"""

from __future__ import annotations

import asyncio

import orjson
import structlog

from parity.services.ingest.chat_backend import ChatBackend

log = structlog.get_logger(__name__)

INLINE_SYSTEM_PROBE = [
    {"role": "system", "content": "t"}, {"role": "user", "content": "t"},
    {"role": "system", "content": "t"}, {"role": "user", "content": "t"},
]  # fmt: skip


class TemplateFacts:
    def __init__(self, backend: ChatBackend) -> None:
        self.backend = backend
        self._merge_inline_system: dict[str, asyncio.Task[bool]] = {}

    async def merge_inline_system(self, model: str) -> bool:
        """Whether `model`'s template needs system messages merged into the leading one."""
        task = self._merge_inline_system.get(model)
        if task is None or (task.done() and task.exception() is not None):
            task = self._merge_inline_system[model] = asyncio.ensure_future(
                self._probe_inline_system(model)
            )
        return await asyncio.shield(task)

    async def _probe_inline_system(self, model: str) -> bool:
        body = orjson.dumps(
            {"model": model, "messages": INLINE_SYSTEM_PROBE, "add_generation_prompt": False}
        )
        status, _ = await self.backend.ask_replica(model, "/tokenize", body)
        merge = status == 400
        log.info("template_probed", model=model, merge_inline_system=merge)
        return merge
