"""DSpark LSP."""

import os

# oneDNN (torch's CPU GEMM for the bf16 prefill products, quant/qkernel.cpp) keeps every primitive it
# builds, one per distinct matrix shape, up to 1,024 by default, each with its own buffers. A prefill's
# row count is the prompt's new tokens, which differ from keystroke to keystroke, so a language server
# collected hundreds of them: the 60-minute soak of the twelfth session grew 1,272 -> 1,748 MB
# (88.5 MB / 10 min), and an in-process replay of 574 completions 1,154 -> 1,719 MB and rising, against
# a plateau of 1,463 MB with the cache capped at 8 (or with fp32 prefill; capped at 16 it still crept
# up, 1,438 -> 1,504 MB over the last 300). One prefill uses about five shapes, repeated over 24 layers,
# so a cache of 8 still hits within a prefill (the capped replay completed no slower). Set before torch
# (and so oneDNN) is first used; a value the user set is kept.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8")

# A second per-shape cache sits in front of it: ideep (torch's oneDNN wrapper) keeps each matmul it has
# built for a shape in its own LRU, LRU_CACHE_CAPACITY entries (default 1,024), whatever oneDNN's cap
# says. Still one per prompt length: with the oneDNN cap alone the 60-minute soak of the thirteenth
# session grew 1,199 -> 1,404 MB after warm-up (41.5 MB / 10 min); a bf16 [M, 896] x [896, 4864] product
# with 200 row counts between 33 and 320 kept +39 MB of live malloc memory with the default, +37 MB
# with the oneDNN cache at 0, +5 MB (all in the first 50) with this at 8 (bench/results/2026-12-02-s14-rss/).
os.environ.setdefault("LRU_CACHE_CAPACITY", "8")

# libgomp (torch's OpenMP runtime on Linux) lets an idle worker thread spin 300,000 iterations before it
# sleeps. A decode is hundreds of short parallel regions a token with Python between them; when anything
# else runs on a 2-core machine (the editor, a browser, a build) a spinning worker holds a core the
# descheduled one needs, and every region waits. Measured with one core busy (bench/results/
# 2026-12-03-omp-spin/): decode 13.1 -> 24.0 tok/s on the 0.5B and 5.2 -> 9.8 on the 1.5B at 1,000, and
# the typing replay's p50 1,611 -> 892 ms; on an idle host the replay's p50 was 0.8x (456 vs 553 ms), a
# smaller loss than the stall it prevents. Set before torch loads libgomp; a spin count or wait policy
# the user set is kept (GOMP_SPINCOUNT=300000 restores libgomp's).
if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"
