"""The draft registry (drafts.registry) and the chain of sources (drafts.chain): every kind in the table
builds a source for the tiny target, every one decodes exactly what the target alone decodes, and the
per-source counters add up to the decode's proposed and accepted tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.chain import ChainLink, DraftChain
from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.hybrid import HybridDraftSource, lookup_of
from dspark_lsp.drafts.io import save_draft, save_feat_draft
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.drafts.registry import (
    DRAFT_KINDS,
    DraftSpec,
    LookupSpec,
    build_draft,
    model_of,
    spec_for,
)
from dspark_lsp.drafts.token.config import DraftNetConfig
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal
from dspark_lsp.errors import UserError

# Code that repeats itself, so the n-gram lookup has matches to propose.
TEXT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"


@pytest.fixture(scope="module")
def trained_dirs(tmp_path_factory: pytest.TempPathFactory, tiny_target: Any) -> dict[str, Path]:
    """A random token draft and a random feature draft for the tiny target, exported as they ship."""
    vocab_size = int(tiny_target.config.vocab_size)
    hidden = int(tiny_target.config.hidden_size)
    root = tmp_path_factory.mktemp("trained-drafts")
    torch.manual_seed(0)
    vocab = DraftVocab(list(range(vocab_size)), vocab_size)
    token = DraftNet(DraftNetConfig(vocab_size=vocab.size, d_model=32, n_layers=1, n_heads=2, d_ff=64,
                                    n_parallel=4, max_context=64, target_vocab_size=vocab_size))
    save_draft(root / "token", token, vocab, {}, dtype=torch.float32)
    feat = FeatDraft(FeatDraftConfig(d_model=hidden, n_heads=2, d_ff=2 * hidden, vocab_size=vocab.size,
                                     target_vocab_size=vocab_size))
    save_feat_draft(root / "feature", feat, vocab, {}, dtype=torch.float32)
    return {"token": root / "token", "feature": root / "feature"}


def _specs(tiny_models: tuple[Path, Path], trained: dict[str, Path]) -> list[DraftSpec]:
    """One spec per kind of the table, each model kind alone and behind the lookup (the hybrid)."""
    names = {"ngram": [""], "trained": [str(trained["token"]), str(trained["feature"])],
             "causal_lm": [str(tiny_models[1])]}
    assert set(names) == set(DRAFT_KINDS)  # a kind added to the table must be added here too
    specs = [DraftSpec("ngram")]
    for kind in ("trained", "causal_lm"):
        for name in names[kind]:
            specs += [DraftSpec(kind, name), DraftSpec(kind, name, lookup=LookupSpec())]
    return specs


def test_every_kind_builds_a_source_that_decodes_what_the_target_alone_decodes(
    tiny_models: tuple[Path, Path], tiny_target: Any, tiny_tokenizer: Any, trained_dirs: dict[str, Path]
) -> None:
    prompt = list(tiny_tokenizer(TEXT)["input_ids"])
    cfg = DecodeConfig(max_new_tokens=20, scheduler=SchedulerConfig(k_max=4))
    dec = SpeculativeDecoder(tiny_target)
    alone = dec.generate(prompt, config=cfg, draft=None)
    assert len(alone.tokens) == 20
    for spec in _specs(tiny_models, trained_dirs):
        src = build_draft(spec, tiny_target)
        assert isinstance(src, DraftSource)
        assert isinstance(src, HybridDraftSource) == (spec.lookup is not None), spec
        res = dec.generate(prompt, config=cfg, draft=src)
        assert res.tokens == alone.tokens, spec
        st = res.stats
        assert st.proposed > 0, spec  # the draft really drafted
        assert sum(st.source_proposed.values()) == st.proposed, spec
        assert sum(st.source_accepted.values()) == st.accepted - st.alt_accepted, spec
        assert all(st.source_accepted[s] <= n for s, n in st.source_proposed.items()), spec
        if isinstance(src, HybridDraftSource):
            # The chain names its sources: the lookup (the prompt repeats itself) and the model.
            assert set(st.source_proposed) <= {"ngram", src.model_source.name}, spec
            assert st.source_proposed["ngram"] > 0, spec
        else:
            assert set(st.source_proposed) == {src.name}, spec


def test_spec_for_tells_the_kinds_apart(tiny_models: tuple[Path, Path], trained_dirs: dict[str, Path]) -> None:
    assert spec_for("ngram") == DraftSpec("ngram")
    assert spec_for(str(trained_dirs["feature"])).kind == "trained"
    assert spec_for(str(tiny_models[1])).kind == "causal_lm"
    assert spec_for(str(tiny_models[1])).lookup == LookupSpec()  # the service's drafts sit behind lookup
    assert spec_for(str(tiny_models[1]), lookup=None).lookup is None
    with pytest.raises(UserError, match="unknown draft kind"):
        build_draft(DraftSpec("eagle"))
    with pytest.raises(UserError, match="no trained draft"):
        build_draft(DraftSpec("trained", str(tiny_models[1])))


def test_ngram_kind_and_lookup_take_the_specs_ngram_sizes(tiny_target: Any, trained_dirs: dict[str, Path]) -> None:
    src = build_draft(DraftSpec("ngram", lookup=LookupSpec(max_ngram=3, min_ngram=2)))
    assert isinstance(src, NgramDraftSource) and (src.max_ngram, src.min_ngram) == (3, 2)
    hybrid = build_draft(DraftSpec("trained", str(trained_dirs["token"]),
                                   lookup=LookupSpec(max_ngram=2, min_confidence=0.75, second_opinion=True)))
    assert isinstance(hybrid, HybridDraftSource)
    lookup = lookup_of(hybrid)
    assert lookup is not None and lookup.max_ngram == 2
    assert hybrid.min_lookup_confidence == 0.75 and hybrid.second_opinion
    assert model_of(hybrid) is hybrid.model_source and model_of(lookup) is None and model_of(None) is None


class _Fixed(DraftSource):
    """A source that always proposes the same tokens at one confidence."""

    supports_parallel = True

    def __init__(self, name: str, tokens: list[int], confidence: float) -> None:
        self.name, self.tokens, self.conf = name, tokens, confidence
        self.calls = 0

    def propose(self, context: list[int], max_tokens: int, *, parallel: bool, tau: float,
                temperature: float = 0.0, generator: torch.Generator | None = None) -> Proposal:
        self.calls += 1
        toks = self.tokens[: max_tokens if parallel else 1]
        return Proposal(tokens=list(toks), confidence=[self.conf] * len(toks))

    def reset(self) -> None:
        pass


def test_the_first_confident_link_answers_and_names_itself() -> None:
    unsure, sure, last = _Fixed("unsure", [1, 2], 0.3), _Fixed("sure", [3, 4, 5], 0.9), _Fixed("last", [6], 0.1)
    chain = DraftChain([ChainLink(unsure, 0.5), ChainLink(sure, 0.8), ChainLink(last)])
    p = chain.propose([0], 3, parallel=True, tau=0.0)
    assert p.tokens == [3, 4, 5] and p.sources == ["sure"] * 3
    assert (unsure.calls, sure.calls, last.calls) == (1, 1, 0)  # asked in order, the rest not at all
    assert chain.propose([0], 2, parallel=False, tau=0.0).tokens == [3]  # one token when not parallel
    # No link confident: the last one answers whatever it has.
    fallback = DraftChain([ChainLink(unsure, 0.5), ChainLink(last)])
    q = fallback.propose([0], 3, parallel=True, tau=0.0)
    assert q.tokens == [6] and q.sources == ["last"]
    assert chain.name == "unsure+sure+last" and chain.propose([0], 0, parallel=True, tau=0.0).tokens == []
    with pytest.raises(ValueError):
        DraftChain([])
