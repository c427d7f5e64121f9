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
