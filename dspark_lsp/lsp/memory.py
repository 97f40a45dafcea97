"""Give the C heap's free memory back to the system after a completion (glibc's ``malloc_trim``).

Why (issue 19's soak): a prefill of more than 32 new tokens runs the quantized kernel's GEMM path, which
rebuilds each weight matrix in fp32 into a scratch tile (``quant/qkernel.cpp``: 17.4 MB for a [4864, 896]
MLP matrix of the 0.5B target) and frees it again. glibc raises its mmap threshold to the size of the first
such block it frees, so from then on these tiles come from the worker thread's malloc arena, whose 64 MB
heaps keep their pages after a ``free``. Measured on the soaked server (malloc_info via gdb): one arena of
1.23 GB with 595 MB of it free; ``malloc_trim(0)`` there took RSS from 1,820 MB to 1,241 MB. Those were
the "12 maps of 52.3 MB" (three tiles per 64 MB heap) and the 17.4 MB ones.

``malloc_trim(0)`` returns the free pages inside every arena (madvise), not only the top of the heap. It
runs on the worker thread after a completion that ran the model, when no other job is queued there (the
answer has already gone to the loop; the next request's debounce covers the few milliseconds it takes).
Other C libraries (musl, macOS) have no ``malloc_trim``: there this is a no-op. ``DSPARK_LSP_MALLOC_TRIM=0``
turns it off (to compare, or should it ever cost more than it saves).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

ENV = "DSPARK_LSP_MALLOC_TRIM"

_lock = threading.Lock()
_trim: Any = None  # the C function, False when there is none, None before the first look
totals = {"trims": 0, "seconds": 0.0}


def _malloc_trim() -> Any:
    global _trim
    with _lock:
        if _trim is None:
            _trim = False
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                fn = libc.malloc_trim
            except (OSError, AttributeError):
                pass
            else:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _trim = fn
        return _trim


def enabled() -> bool:
    """Whether trimming is on (the environment may turn it off) and this C library can do it."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    return bool(_malloc_trim())


def release_free_memory() -> bool:
    """``malloc_trim(0)``: True when the C library returned memory to the system."""
    fn = _malloc_trim()
    if not fn:
        return False
    started = time.perf_counter()
    released = bool(fn(0))
    with _lock:
        totals["trims"] += 1
        totals["seconds"] += time.perf_counter() - started
    return released
