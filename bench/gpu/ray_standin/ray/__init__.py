"""Import-only stand-in for `ray`, for the in-process fsdp path on a machine without ray (bench/gpu/check.sh).

verl imports ray at module level (and calls `ray.remote(...)` on a few classes while
importing) but the in-process path never starts or talks to a Ray cluster. Every
callable here except `is_initialized` (False, as real Ray answers when no cluster was
started) raises, so any real use of Ray fails loudly instead of doing something else.
"""

import sys as _sys

__version__ = "0.0.0+import-shim"
_SHIM = True


class RayShimError(RuntimeError):
    pass


def _note(what):
    print(f"ray-shim: {what}", file=_sys.stderr, flush=True)


def _unavailable(name):
    def call(*args, **kwargs):
        _note(f"ray.{name} called -> raising")
        raise RayShimError(f"ray.{name} called, but this process has only an import shim for ray")

    call.__name__ = name
    return call


class _RemoteStandIn:
    """What `ray.remote(cls_or_fn)` returns at import time: using it raises."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _note(f"ray.remote({self._target!r}).{name} used -> raising")
        raise RayShimError(
            f"ray.remote({self._target!r}).{name} used, but ray is only an import shim"
        )

    def __call__(self, *args, **kwargs):
        _note(f"ray.remote({self._target!r}) called -> raising")
        raise RayShimError(f"ray.remote({self._target!r}) called, but ray is only an import shim")


def remote(*args, **kwargs):
    # @ray.remote / ray.remote(cls) -> stand-in; @ray.remote(num_cpus=0) -> decorator giving a stand-in.
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _RemoteStandIn(args[0])
    return lambda target: _RemoteStandIn(target)


def is_initialized():
    _note("ray.is_initialized() -> False")
    return False


class ObjectRef:  # only for isinstance checks and annotations
    def __init__(self, *args, **kwargs):
        raise RayShimError("ray.ObjectRef created, but ray is only an import shim")


for _name in (
    "init",
    "get",
    "put",
    "wait",
    "kill",
    "nodes",
    "get_actor",
    "get_runtime_context",
    "available_resources",
    "cluster_resources",
    "shutdown",
):
    globals()[_name] = _unavailable(_name)

from . import actor, experimental, util  # noqa: E402,F401
