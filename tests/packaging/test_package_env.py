"""What importing the package sets up in the process environment."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def _seen(env: dict[str, str], var: str = VAR) -> str:
    """The value of ``var`` in a fresh interpreter after ``import dspark_lsp``."""
    code = f"import os, dspark_lsp; print(os.environ.get({var!r}, ''))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_import_caps_onednns_primitive_cache_unless_the_user_set_it() -> None:
    """The bf16 prefill GEMM built a oneDNN primitive per prompt length and kept up to 1,024 of them: a
    language server's memory grew 88.5 MB / 10 min in the soak. The package caps the cache at import,
    before torch first uses oneDNN, and keeps a value the user chose."""
    env = {k: v for k, v in os.environ.items() if k != VAR}
    assert _seen(env) == "8"
    assert _seen({**env, VAR: "64"}) == "64"


LRU = "LRU_CACHE_CAPACITY"

_GROWTH = r"""
import ctypes, random, dspark_lsp, torch
torch.set_num_threads(1)
libc = ctypes.CDLL("libc.so.6")
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MI
def live(): return libc.mallinfo2().uordblks / 2**20
w = torch.randn(4864, 896).to(torch.bfloat16)
rows = random.Random(0).sample(range(33, 321), 160)
def run(ms):
    for m in ms: torch.mm(torch.randn(m, 896).to(torch.bfloat16), w.t())
run(rows[:40])
before = live()
run(rows[40:])
print(live() - before)
"""


def test_import_caps_ideeps_matmul_cache_unless_the_user_set_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != LRU}
    assert _seen(env, LRU) == "8"
    assert _seen({**env, LRU: "64"}, LRU) == "64"


@pytest.mark.skipif(not sys.platform.startswith("linux") or not ctypes.util.find_library("c"), reason="glibc's mallinfo2")
def test_bf16_products_of_new_row_counts_keep_no_memory() -> None:
    """The soak still grew 41.5 MB / 10 min with oneDNN's cache capped: ideep keeps its own matmul per
    shape (LRU_CACHE_CAPACITY, 1,024 by default), and the bf16 prefill's row count is the prompt's new
    tokens. 120 new row counts after the first 40 kept ~20 MB of live malloc memory before the cap."""
    env = {k: v for k, v in os.environ.items() if k not in (LRU, VAR)}
    out = subprocess.run([sys.executable, "-c", _GROWTH], env=env, capture_output=True, text=True)
    if out.returncode != 0 and "mallinfo2" in out.stderr:
        pytest.skip("no mallinfo2 in this C library")
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) < 6.0


SPIN = "GOMP_SPINCOUNT"


def test_import_leaves_libgomps_spin_wait_to_libgomp() -> None:
    """The package once set GOMP_SPINCOUNT=1000 (a busy core elsewhere halved the decode with libgomp's
    300,000). The engine now drops to one thread when another program keeps a core busy
    (engine/cpu_share.py), and on an idle host the long spin is the faster one (docs/CPU_THREADS.md): the
    import must not shorten it again, and a count the user chose reaches libgomp untouched."""
    env = {k: v for k, v in os.environ.items() if k not in (SPIN, "OMP_WAIT_POLICY")}
    assert _seen(env, SPIN) == ""
    assert _seen({**env, SPIN: "1000"}, SPIN) == "1000"
