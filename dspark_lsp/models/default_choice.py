"""Which pair to load for the ``model`` setting, given what is prepared in the cache.

The default target changed from the 0.5B to the 1.5B (issue 32; docs/MODELS.md). A user who upgrades
has the 0.5B prepared and not the 1.5B; failing every completion with "not prepared" until they run a
1.1 GB download would be a surprise. So only for the name ``default`` (an explicit model name is taken
as asked): when the default target is not prepared but the previous default is, that one serves, and
the caller says once, with the command that switches.

The 1.5B was chosen on a CPU where its one-token forward takes ~35-40 ms (docs/MODELS.md); where it takes
much longer (a 2-core AVX2 CPU without AVX-512: ~57 ms, and follow-ups while typing of ~250 ms mid-file and
~560 ms at a file's end against the 0.5B's ~170 / ~260) the 0.5B is the better trade for many users. The
load measures that forward anyway (engine/costs.py); ``speed_note`` turns a slow figure into a note naming
the faster pair. Only for ``default``: naming the 1.5B is the way to keep it without the note.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dspark_lsp.models import cache
from dspark_lsp.models.prepare import is_prepared
from dspark_lsp.models.registry import DEFAULT_TARGET, QWEN_05B, PairSpec, get_model_spec, pair_for

# The default target before issue 32, and the pair that serves it with its own draft.
PREVIOUS_DEFAULT = QWEN_05B.name


@dataclass(frozen=True)
class PairChoice:
    """The pair to load, and a one-line note when it is not the one the settings named (else None)."""

    pair: PairSpec
    note: str | None = None


def choose_pair(model: str, draft: str | None, cache_dir: str | Path | None = None) -> PairChoice:
    """``pair_for(model, draft)``, except that ``default`` falls back to the previous default's pair
    while the default target is not prepared and the previous one is (see the module's docstring)."""
    asked = pair_for(model, draft)
    if model != "default" or asked.target != DEFAULT_TARGET:
        return PairChoice(asked)
    root = cache.cache_root(cache_dir)
    # Ready to load is enough (a kept GGUF is not required: without one the fp32 copy runs).
    ready = [is_prepared(get_model_spec(name), root, keep_gguf=False) for name in (DEFAULT_TARGET, PREVIOUS_DEFAULT)]
    if ready[0] or not ready[1]:
        return PairChoice(asked)  # ready, or nothing to fall back on: the load says what to prepare
    note = (f"the default model is now {DEFAULT_TARGET} (better completions, docs/MODELS.md) and is not "
            f"prepared here: {PREVIOUS_DEFAULT} serves meanwhile; run `dspark-lsp models prepare` and restart the "
            f"server to switch, or set the model to {PREVIOUS_DEFAULT} to keep it")
    return PairChoice(pair_for(PREVIOUS_DEFAULT, draft), note)


# A one-token forward of the default target slower than this (the load's calibration: fastest of two, on a
# 128-token cache) gets the note: ~35-40 ms on the 2-core Zen 4 the default was chosen on, 57 on a 2-core
# Zen 3 (AVX2 only) and 51 on a 2-core AMX Xeon, where the 1.5B's follow-ups missed 400 ms at a file's end.
SLOW_ONE_TOKEN_MS = 48.0


def speed_note(model: str, target: str, one_token_ms: float | None, cache_dir: str | Path | None = None) -> str | None:
    """A one-line note when ``default`` serves the default target on a CPU where its measured one-token
    forward (``one_token_ms``; None: not measured) is slow, naming the faster pair and how to get it."""
    if model != "default" or target != DEFAULT_TARGET or one_token_ms is None or one_token_ms <= SLOW_ONE_TOKEN_MS:
        return None
    ready = is_prepared(get_model_spec(PREVIOUS_DEFAULT), cache.cache_root(cache_dir), keep_gguf=False)
    get = "" if ready else f"run `dspark-lsp models prepare {PREVIOUS_DEFAULT}` and "
    return (f"{DEFAULT_TARGET} is slow on this CPU ({one_token_ms:.0f} ms a token; the default was chosen where it "
            f"takes about 40), so completions while typing may take half a second or more. {PREVIOUS_DEFAULT} "
            f"answers in about half the time, with less accurate completions: {get}set the model to "
            f"{PREVIOUS_DEFAULT}. Set it to {DEFAULT_TARGET} to keep this one without this note (docs/MODELS.md)")
