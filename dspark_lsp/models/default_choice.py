"""Which pair to load for the ``model`` setting, given what is prepared in the cache.

The default target changed from the 0.5B to the 1.5B (issue 32; docs/MODELS.md). A user who upgrades
has the 0.5B prepared and not the 1.5B; failing every completion with "not prepared" until they run a
1.1 GB download would be a surprise. So only for the name ``default`` (an explicit model name is taken
as asked): when the default target is not prepared but the previous default is, that one serves, and
the caller says once, with the command that switches.

Where the 1.5B answers slowly (a 2-core AVX2 CPU: ~560-600 ms at a file's end against the 0.5B's ~260),
``slow_default_note`` is the note the server shows once it has seen it (latency_note.py): the faster pair and
how to get it. Only for ``default``: naming the 1.5B is the way to keep it without the note.
"""

from __future__ import annotations

from collections.abc import Callable
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


def slow_default_note(model: str, target: str, cache_dir: str | Path | None = None) -> Callable[[float, int], str] | None:
    """For ``default`` serving the default target: the note to show when its answers come slowly on this
    machine (latency_note.py), given their median and count; else None (an explicit name is a choice)."""
    if model != "default" or target != DEFAULT_TARGET:
        return None

    def note(median_ms: float, count: int) -> str:
        ready = is_prepared(get_model_spec(PREVIOUS_DEFAULT), cache.cache_root(cache_dir), keep_gguf=False)
        get = "" if ready else f"run `dspark-lsp models prepare {PREVIOUS_DEFAULT}` and "
        return (f"completions took {median_ms:.0f} ms (median of the last {count}) with {DEFAULT_TARGET} on this "
                f"CPU. {PREVIOUS_DEFAULT} answers in about half the time, with less accurate completions: {get}set "
                f"the model to {PREVIOUS_DEFAULT}. Set it to {DEFAULT_TARGET} to keep this one without this note "
                f"(docs/MODELS.md)")

    return note
