"""A CPU platform for verl, so its FSDP engine runs on machines without an accelerator.

verl 0.9 picks a hardware platform (CUDA, NPU, ROCm) once per process and registers its
FSDP engine per device type; with no accelerator it falls back to CUDA and fails. It
offers both as extension points (`PlatformRegistry.register`, `EngineRegistry.register`),
and this module uses them: torch's FSDP2 and the gloo process group run on CPU, so the
engine itself needs only a device name, a no-op device API and `gloo`.

`install()` must run before anything imports verl's FSDP engine module, which reads the
platform's device name when it is imported.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform


class _CpuDeviceModule(types.SimpleNamespace):
    """What verl calls on `torch.cuda`, answered for host memory; the rest falls through to `torch.cpu`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


_DEVICE_MODULE = _CpuDeviceModule(
    # verl logs device memory around each phase; host memory has no such counters.
    max_memory_allocated=lambda *_a, **_k: 0,
    max_memory_reserved=lambda *_a, **_k: 0,
    memory_allocated=lambda *_a, **_k: 0,
    memory_reserved=lambda *_a, **_k: 0,
    mem_get_info=lambda *_a, **_k: (0, 0),
    reset_peak_memory_stats=lambda *_a, **_k: None,
    empty_cache=lambda: None,
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
    # Checkpoints save and restore the device RNG next to the host one; on CPU they are the same.
    get_rng_state=lambda *_a, **_k: torch.get_rng_state(),
    set_rng_state=lambda state, *_a, **_k: torch.set_rng_state(state),
)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE  # type: ignore[return-value]

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        # verl moves modules and batches with `.to(current_device())`; an index would mean cuda:N.
        return "cpu"  # type: ignore[return-value]

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


_installed = False


def install() -> None:
    """Make this process's verl platform the CPU one and register verl's FSDP engine for it (once)."""
    global _installed
    if _installed:
        return
    set_platform(PlatformCPU())
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(
        FSDPEngineWithLMHead
    )
    _installed = True
