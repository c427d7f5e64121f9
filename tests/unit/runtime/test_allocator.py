import os
import subprocess
import sys

import pytest

from parity.services.runtime import allocator

pytestmark = pytest.mark.skipif(
    not os.confstr("CS_GNU_LIBC_VERSION"), reason="mallopt settings are glibc's"
)

# Prints how many blocks glibc served as mappings of their own while a 24 MB block is
# held: above the default threshold, below the one keep_freed_memory sets.
_COUNT_MAPPED_BLOCKS = """
import ctypes, sys
from parity.services.runtime import allocator
if sys.argv[1] == "tuned":
    assert allocator.keep_freed_memory()
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2().hblks
block = libc.malloc(24 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


def test_glibc_accepts_every_setting() -> None:
    # glibc refuses an mmap threshold above its maximum (32 MB on 64-bit) and keeps
    # its default: every value must be one it takes.
    assert allocator.keep_freed_memory()


@pytest.mark.parametrize(("mode", "mapped"), [("default", "1"), ("tuned", "0")])
def test_large_blocks_come_from_the_heap_once_tuned(mode: str, mapped: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _COUNT_MAPPED_BLOCKS, mode],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == mapped


# Four threads take turns, as the trainer's concurrent runs do, each allocating and freeing 512 MiB of
# 4 MiB tensors in a service's settings; prints the resident MiB before and after the release.
_THREADS_TAKING_TURNS = """
import threading, torch
from parity.services.runtime import allocator
assert allocator.keep_freed_memory()

def resident_mib():
    return next(int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmRSS"))

lock = threading.Lock()

def turns():
    for _ in range(2):
        with lock:
            held = [torch.ones(1024, 1024) for _ in range(64)]
            doubled = [t * 2 for t in held]
            del held, doubled

threads = [threading.Thread(target=turns) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
before = resident_mib()
allocator.release_freed_memory()
print(before, resident_mib())
"""


def test_what_threads_taking_turns_freed_goes_back_on_release() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _THREADS_TAKING_TURNS],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    before, after = map(int, run.stdout.split())
    # Each thread's heap kept its turn's 512 MiB (one thread's would be reused by the next turn); released.
    assert before - after > 1024, (before, after)
