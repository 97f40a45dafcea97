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
# sleeps. The package used to cut that to 1,000: with another program keeping a core of a 2-core host busy,
# a spinning worker held the core its partner needed and the 1.5B decoded at about half speed. It no
# longer does: the engine now runs one thread while other programs keep a core busy (engine/cpu_share.py),
# so no worker is left to spin against them, and on an idle host the long spin is the faster one (the
# 1.5B's one-token forward 29-31 ms against 31-34 ms at 1,000 on Zen 5, 29-33 against 43-46 on Zen 4;
# docs/CPU_THREADS.md). A spin count or wait policy the user sets is still honoured by libgomp itself.
