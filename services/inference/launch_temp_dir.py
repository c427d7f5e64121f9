"""The temp directory a vLLM launch runs in: its own, removed when it stops, except torch's compile cache.

vLLM leaves ZeroMQ socket and lock files in the temp directory on every start, so each launch gets a
directory of its own (TMPDIR), removed with it. Torch keeps its compiled kernels and precompiled C++
headers under `<temp dir>/torchinductor_<user>` too, and vLLM's CPU backend compiles some at every
start (about 20 s of CPU on two cores). That folder is linked to the machine's own, where every other
torch process keeps it, so a launch compiles only what no launch before it has.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path


def compile_cache_name() -> str:
    """Torch's name for a user's compile cache folder in a temp directory (torch._inductor's default)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)


def make_launch_temp_dir(shared_root: Path | None = None) -> Path:
    """A fresh temp directory whose compile cache is the one shared under `shared_root` (the machine's temp)."""
    root = Path(tempfile.gettempdir()) if shared_root is None else shared_root
    shared = root / compile_cache_name()
    shared.mkdir(parents=True, exist_ok=True)
    launch = Path(tempfile.mkdtemp(prefix="parity-vllm-", dir=root))
    (launch / shared.name).symlink_to(shared, target_is_directory=True)
    return launch
