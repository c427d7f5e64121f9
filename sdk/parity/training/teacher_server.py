"""A distillation teacher the local stack serves: a model name or folder, on a vLLM of its own.

The teacher's vLLM starts beside `parity up` and stops with it. It serves on 127.0.0.1
only, in the policy's dtype and context length, and only scores (no tool parsing, no
render endpoints). It is warmed with one scoring request before the run starts: a fresh
vLLM on CPU takes tens of seconds over its first forward pass, which would otherwise land
on the trainer's check of the teacher. A teacher given as a URL is served elsewhere and needs nothing here.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from parity.core.update_settings import is_url
from parity.services.inference.gguf_import import ModelPreparationError
from parity.services.inference.packaged_models import resolve_model
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer
from parity.training.settings import SettingsError

# The model name the teacher is served under; the trainer asks for it.
SERVED_NAME = "teacher"


def teacher_folder(teacher: str) -> Path | None:
    """The folder of a teacher named by model name or folder, prepared like the run's model; None for a URL or none."""
    if not teacher or is_url(teacher):
        return None
    try:
        return resolve_model(teacher).resolve()
    except ModelPreparationError as error:
        raise SettingsError("teacher", str(error)) from None


def teacher_server(
    folder: Path, port: int, dtype: str, max_model_len: int | None, log_path: Path
) -> VllmServer:
    """The teacher's vLLM, not started; `max_model_len` None takes the launcher's default."""
    config = VllmLaunchConfig(
        model_path=folder, port=port, served_model_name=SERVED_NAME, dtype=dtype, tool_call_parser=None,
        enable_scale_out=False, log_path=log_path, die_with_parent=True,
    )  # fmt: skip
    if max_model_len is not None:
        config.max_model_len = max_model_len
    return VllmServer(config)


def warm_up(server: VllmServer, timeout_s: float) -> None:
    """One prompt-logprobs request, so the first forward pass's cost is paid before the run starts."""
    payload = {
        "model": SERVED_NAME,
        "prompt": [0, 1, 2, 3],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 0,
    }
    httpx.post(
        f"{server.base_url}/v1/completions", json=payload, timeout=timeout_s
    ).raise_for_status()
