"""glibc malloc settings for a long-running service process.

A service allocates and frees a request's worth of memory (a 300 KB batch of calls, a
capture batch) over and over. With glibc's defaults it hands that memory back to the
kernel almost as soon as it is free and takes it back on the next request: a thread's
heap grows again one `mprotect` at a time, and every page it touches again is a page
fault. Served, at 16 writers, the token store made about 10,000 `mprotect` calls per
24,000 calls written, and its threads spent 3 to 10% of their time in page faults.

Keeping freed memory at the top of the heaps (up to `TRIM_THRESHOLD_BYTES`) and serving
requests up to `MMAP_THRESHOLD_BYTES` from the heaps rather than from fresh mappings
removes those calls. Memory stays bounded: a heap keeps at most what the process once
used, and protobuf's allocator still returns idle pages with `malloc_trim` every
10,000 frees.

What a heap keeps is its own thread's: another thread allocates from its own arena. A process
whose threads take turns on large work (the trainer's concurrent runs, each a thread, each
step's activations tens of MB a tensor) would keep every thread's freed share;
`release_freed_memory` hands it back between turns.
"""

from __future__ import annotations

import ctypes
import os

import structlog

log = structlog.get_logger(__name__)

# mallopt parameters, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

# A thread's heap is at most 64 MB: padding each new one by as much maps it whole at
# once, rather than growing it page range by page range.
TOP_PAD_BYTES = 64 << 20
TRIM_THRESHOLD_BYTES = 128 << 20
# glibc's largest allowed value. Setting any of these parameters switches off glibc's
# own raising of the threshold, which would otherwise track the largest block freed.
MMAP_THRESHOLD_BYTES = 32 << 20

SETTINGS = {
    M_TOP_PAD: TOP_PAD_BYTES,
    M_TRIM_THRESHOLD: TRIM_THRESHOLD_BYTES,
    M_MMAP_THRESHOLD: MMAP_THRESHOLD_BYTES,
}


def is_glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (OSError, ValueError):
        return False


def keep_freed_memory() -> bool:
    """Apply SETTINGS to glibc's malloc. Returns False, changing nothing, where the C
    library is not glibc (musl, macOS): their allocators do not work this way."""
    if not is_glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    refused = [parameter for parameter, value in SETTINGS.items() if mallopt(parameter, value) != 1]
    if refused:
        log.warning("mallopt_refused", parameters=refused)
    return not refused


def release_freed_memory() -> None:
    """Return the free memory of every thread's heap to the kernel (glibc's `malloc_trim`);
    nothing where the C library is not glibc."""
    if is_glibc():
        ctypes.CDLL(None).malloc_trim(0)
