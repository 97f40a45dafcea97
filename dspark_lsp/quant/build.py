"""Compile the quantized-matmul kernel (``qkernel.cpp``) once per machine and load it into torch.

It is built with the machine's own C++ compiler for the CPU it runs on (``-march=native``), against the
installed torch's headers, and cached under the model cache (``<root>/kernels/<hash>/``) keyed by the
source, torch version and CPU flags, so a second start loads it in milliseconds. Compiling takes ~30 s on
two cores. Anything that goes wrong (no compiler, headers missing, a non-x86 CPU the flags do not suit)
is reported as :class:`KernelUnavailable` with one line saying why; callers fall back to fp32 weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

SOURCES = tuple(Path(__file__).with_name(n) for n in ("qkernel.cpp", "decoder_layer.cpp"))
HEADERS = (Path(__file__).with_name("qkernel.h"),)
LIB_NAME = "dspark_q.so"
ENV_DISABLE = "DSPARK_NO_QKERNEL"  # set to 1 to force the fp32 fallback (tests, debugging)
# The instruction set to compile for (gcc's -march), "native" by default. Another level, e.g. "x86-64-v3"
# (AVX2, FMA, F16C: what most laptops have), builds the paths such a CPU runs, so a bigger CPU can test
# and time them; the cache key includes it.
ENV_MARCH = "DSPARK_KERNEL_MARCH"

_loaded: Path | None = None
_failure: str | None = None
_guard = threading.Lock()


class KernelUnavailable(RuntimeError):
    """The kernel cannot be built or loaded here; the message says why in one line."""


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _march() -> str:
    return os.environ.get(ENV_MARCH, "").strip() or "native"


def _compile_command(out: Path) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    torch_lib = Path(torch.__file__).parent / "lib"
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"
    abi = int(torch.compiled_with_cxx11_abi())
    cmd = [cxx, "-O3", f"-march={_march()}", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-std=c++17",
           "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w"]
    for inc in cpp_extension.include_paths():
        cmd += ["-isystem", inc]
    cmd += [*(str(src) for src in SOURCES), "-o", str(out), f"-L{torch_lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
    return cmd


def _key() -> str:
    import torch

    h = hashlib.sha256()
    for src in (*SOURCES, *HEADERS):
        h.update(src.read_bytes())
    h.update(torch.__version__.encode())
    h.update(_cpu_flags().encode())
    h.update(_march().encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def _build(dest: Path, log: Callable[[str], None]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=dest.parent) as tmp:
        out = Path(tmp) / LIB_NAME
        cmd = _compile_command(out)
        log("compiling the quantized kernels for this CPU (once, ~30 s)")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except FileNotFoundError as exc:
            raise KernelUnavailable(f"no C++ compiler ({exc.filename}); install g++ or set CXX") from None
        except subprocess.TimeoutExpired:
            raise KernelUnavailable("compiling the kernel took over 10 minutes") from None
        if proc.returncode != 0:
            err = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()] or proc.stderr.splitlines()
            raise KernelUnavailable(f"compiling the kernel failed: {(err or ['?'])[0].strip()}")
        os.replace(out, dest)  # atomic: a reader never sees half a library


def kernel_dir(cache_root: str | os.PathLike[str] | None = None) -> Path:
    from dspark_lsp.models import cache

    return cache.cache_root(cache_root) / "kernels"


def load_kernel(cache_root: str | os.PathLike[str] | None = None,
                log: Callable[[str], None] | None = None) -> Path:
    """Build (when needed) and load the kernel; returns the library path. Raises KernelUnavailable."""
    global _loaded, _failure
    if os.environ.get(ENV_DISABLE, "").strip() not in ("", "0"):  # checked every call, never cached
        raise KernelUnavailable(f"disabled by {ENV_DISABLE}")
    with _guard:
        if _loaded is not None:
            return _loaded
        if _failure is not None:
            raise KernelUnavailable(_failure)
        import torch

        say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        try:
            dest = kernel_dir(cache_root) / _key() / LIB_NAME
            if not dest.is_file():
                lock = dest.parent.with_suffix(".lock")
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(lock, "a+") as fh:
                    with contextlib.suppress(ImportError):
                        import fcntl

                        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # two servers starting at once build once
                    if not dest.is_file():
                        _build(dest, say)
            try:
                torch.ops.load_library(str(dest))
            except Exception as exc:  # a stale or foreign library: say so rather than crash
                raise KernelUnavailable(f"cannot load {dest}: {str(exc).splitlines()[0] if str(exc) else exc}") from None
        except KernelUnavailable as exc:
            _failure = str(exc)
            raise
        except OSError as exc:
            _failure = f"cannot build the kernel: {exc}"
            raise KernelUnavailable(_failure) from None
        _loaded = dest
        return dest


def kernel_available(cache_root: str | os.PathLike[str] | None = None) -> bool:
    try:
        load_kernel(cache_root)
    except KernelUnavailable:
        return False
    return True
