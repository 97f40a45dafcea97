"""The feature draft's block step, Markov head and confidence head (docs/ALGORITHM.md): the training layout
equals what inference runs, the Markov head chains a block, the confidence head sets the round, and
decoding stays lossless."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from featdraft_testlib import Embed
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.feature.source import FeatureDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.io import load_feat_draft, save_feat_draft
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.training.block_train import block_mask, pick_anchors, reliability

D = 16


def block_draft(seed: int, vocab: int = 16, block: int = 4, rank: int = 4) -> tuple[FeatDraft, DraftVocab]:
    torch.manual_seed(seed)
    dv = DraftVocab(list(range(vocab)), vocab)
    model = FeatDraft(FeatDraftConfig(d_model=D, n_heads=2, d_ff=2 * D, vocab_size=dv.size, target_vocab_size=vocab,
                                      block_size=block, markov_rank=rank, confidence_head=True))
    with torch.no_grad():
        model.head.weight.mul_(20.0)
        assert model.markov_out is not None
        model.markov_out.weight.normal_(std=3.0)  # a Markov head that matters (a new one starts at zero)
    return model.eval(), dv


def test_block_mask_layout() -> None:
    m = block_mask(6, torch.tensor([1, 3]), 2)[0, 0]
    assert m.shape == (4, 6 + 4)
    # Row 2 = offset 2 of anchor 1: true keys 0..1, offset-1 and offset-2 keys of the same anchor only.
    assert m[2, :6].tolist() == [True, True, False, False, False, False]
    assert m[2, 6:].tolist() == [True, False, True, False]
    # Row 1 = offset 1 of anchor 3: true keys 0..3 and its own key.
    assert m[1, :6].tolist() == [True, True, True, True, False, False]
    assert m[1, 6:].tolist() == [False, True, False, False]


@torch.no_grad()
def test_block_training_rows_equal_the_cached_block_step() -> None:
    """Offset i of anchor a in the training layout must be exactly the inference block forward run after
    the true positions 0..a."""
    model, _ = block_draft(0)
    n, nb = 10, 3
    emb, feat = torch.randn(1, n, D), torch.randn(1, n, D)
    anchors = torch.tensor([0, 2, 5, 6])
    m = int(anchors.numel())
    first = torch.randn(1, m, D)
    cache = model.new_cache()
    g1 = model(emb, feat, torch.arange(n)[None], None, cache)
    x = model.block_inputs(nb, g1[:, anchors], first).transpose(1, 2).reshape(1, nb * m, D)
    pos = (anchors.repeat(nb) + torch.arange(1, nb + 1).repeat_interleave(m))[None]
    rows = model.body(x, pos, block_mask(n, anchors, nb), cache)[0]
    for ai, a in enumerate(anchors.tolist()):
        c = model.new_cache()
        ga = model(emb[:, : a + 1], feat[:, : a + 1], torch.arange(a + 1)[None], None, c)[0, -1]
        h = model.body(model.block_inputs(nb, ga, first[0, ai])[None], torch.arange(a + 1, a + 1 + nb)[None], None,
                       c)[0]
        for i in range(nb):
            assert torch.allclose(h[i], rows[i * m + ai], atol=1e-5), (a, i)


@torch.no_grad()
def test_a_block_is_one_forward_chained_by_the_markov_head() -> None:
    model, dv = block_draft(1)
    embed = Embed(16, D)
    g = torch.Generator().manual_seed(2)
    ctx = torch.randint(0, 16, (12,), generator=g).tolist()
    feats = torch.randn(12, D, generator=g)
    src = FeatureDraftSource(model, dv, embed, use_confidence=False)
    assert src.supports_parallel
    src.set_features(0, feats[:11])
    p = src.propose(ctx, 4, parallel=True, tau=0.0)
    assert len(p.tokens) == 4 and p.forwards == 2  # the true positions, then the whole block at once
    assert src._cache.length == 11  # the block's keys are not context

    # The same tokens by hand: head(h_i) + W2 W1[previous choice], greedy, UNK/MASK never chosen.
    c = model.new_cache()
    gg = model(embed(torch.tensor([ctx[1:12]])), feats[None, :11], torch.arange(11)[None], None, c)[0, -1]
    prev = ctx[-1]
    want: list[int] = []
    h = torch.empty(0)
    for i in range(4):
        lg = model.logits(gg if i == 0 else h[i - 1], dv.to_draft[prev])
        lg[:2] = -float("inf")
        prev = int(dv.to_target[int(lg.argmax())])
        want.append(prev)
        if i == 0:  # offset 1 reads the anchor's own token
            x = model.block_inputs(3, gg, embed(torch.tensor([prev]))[0])[None]
            h = model.body(x, torch.arange(11, 14)[None], None, c)[0]
    assert p.tokens == want

    # Without its Markov head the block guesses differently (the head is what chains it).
    plain = FeatureDraftSource(model, dv, embed, use_markov=False, use_confidence=False)
    plain.set_features(0, feats[:11])
    assert plain.propose(ctx, 4, parallel=True, tau=0.0).tokens != p.tokens


@torch.no_grad()
def test_key_positions_and_chained_context_draft_autoregressively() -> None:
    model, dv = block_draft(3)
    embed = Embed(16, D)
    feats = torch.randn(12, D)
    ctx = list(range(12))
    src = FeatureDraftSource(model, dv, embed, use_confidence=False)
    src.set_features(0, feats[:11])
    assert src.propose(ctx, 4, parallel=False, tau=0.0).forwards == 4  # one forward per token
    src.set_features(0, feats[:8])  # a lookup proposed 9..11 this round: the block needs true features
    assert src.propose(ctx, 2, parallel=True, tau=0.0).forwards == 3 + 2
    off = FeatureDraftSource(model, dv, embed, use_block=False)
    assert not off.supports_parallel


def test_confidence_head_sets_the_confidence_and_the_round_length(random_lm: Any) -> None:
    target = random_lm(2, vocab_size=16, hidden=D, layers=1)
    model, dv = block_draft(4)
    prompt = list(range(2, 12))
    runs = {}
    for bias in (8.0, -8.0):
        with torch.no_grad():
            assert model.conf_step is not None and model.conf is not None
            model.conf.zero_()
            model.conf_step.fill_(bias)
        src = FeatureDraftSource(model, dv, target.get_input_embeddings())
        assert src.calibrated
        src.set_features(0, torch.randn(len(prompt) - 1, D))
        p = src.propose(prompt, 5, parallel=False, tau=0.5)
        assert all(abs(c - torch.sigmoid(torch.tensor(bias)).item()) < 1e-4 for c in p.confidence)
        cfg = DecodeConfig(max_new_tokens=24, scheduler=SchedulerConfig(k_max=5, verify_cost_ms={1: 10.0, 6: 30.0}))
        out = SpeculativeDecoder(target).generate(prompt, config=cfg, draft=src)
        runs[bias] = out.stats.proposed / max(1, out.stats.target_forwards)
    # Sure of every token: each round drafts k_max; sure of none: only the always-kept first token.
    assert runs[8.0] > 3.0 and runs[-8.0] <= 1.0


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), n_prompt=st.integers(2, 20), k=st.integers(1, 5),
       mode=st.sampled_from(["semi", "parallel", "ar"]), hybrid=st.booleans(), conf=st.booleans())
def test_block_draft_is_lossless(random_lm: Any, greedy_reference: Any, seed: int, n_prompt: int, k: int,
                                 mode: str, hybrid: bool, conf: bool) -> None:
    target = random_lm(seed % 7, vocab_size=16, hidden=D, layers=1)
    model, dv = block_draft(seed)
    src: Any = FeatureDraftSource(model, dv, target.get_input_embeddings(), use_confidence=conf)
    if hybrid:
        src = HybridDraftSource(src, NgramDraftSource())
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 16, (n_prompt,), generator=g).tolist()
    rng = random.Random(seed)
    keys = {i: rng.random() < 0.4 for i in range(64)}

    def is_key(ids: list[int]) -> bool:
        return keys[len(ids) % 64]

    cfg = DecodeConfig(max_new_tokens=14, draft_mode=mode, scheduler=SchedulerConfig(fixed_k=k))  # type: ignore[arg-type]
    out = SpeculativeDecoder(target).generate(prompt, config=cfg, draft=src, is_key=is_key)
    assert out.tokens == greedy_reference(target, prompt, 14)
    # Every accepted chain token is recorded as accepted, and each round adds at most one rejection.
    cal = out.stats.calibration
    assert sum(a for _, a, _ in cal) == out.stats.accepted - out.stats.alt_accepted
    assert len(cal) - sum(a for _, a, _ in cal) <= out.stats.target_forwards
    if mode == "parallel" and not hybrid and k > 1:
        assert out.stats.draft_steps_parallel > 0


def test_new_parts_round_trip_and_an_old_draft_still_loads(tmp_path: Path) -> None:
    model, dv = block_draft(5)
    save_feat_draft(tmp_path / "new", model, dv, {"step": 1}, dtype=torch.float32)
    back, _, _ = load_feat_draft(tmp_path / "new")
    assert back.cfg.block_size == 4 and back.cfg.markov_rank == 4 and back.cfg.confidence_head
    for (k, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    old = FeatDraft(FeatDraftConfig(d_model=D, n_heads=2, d_ff=2 * D, vocab_size=dv.size, target_vocab_size=16))
    save_feat_draft(tmp_path / "old", old, dv, {"step": 1})
    cfg = json.loads((tmp_path / "old" / "feat_config.json").read_text())
    for key in ("block_size", "markov_rank", "confidence_head"):  # what an older release wrote
        cfg.pop(key)
    (tmp_path / "old" / "feat_config.json").write_text(json.dumps(cfg))
    loaded, _, _ = load_feat_draft(tmp_path / "old")
    assert not loaded.has_block and loaded.markov_in is None and loaded.conf is None
    src = FeatureDraftSource(loaded, dv, Embed(16, D))
    assert not src.supports_parallel and not src.calibrated


def test_reliability_bins_report_prediction_and_rate() -> None:
    logits = torch.logit(torch.tensor([0.05, 0.05, 0.95, 0.95, 0.95, 0.95]))
    labels = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    rows = reliability(logits, labels, 10)
    assert [r["bin"] for r in rows] == [0, 9]
    assert rows[0]["count"] == 2 and rows[0]["measured"] == 0.0
    assert rows[1]["count"] == 4 and rows[1]["measured"] == 0.75 and abs(rows[1]["predicted"] - 0.95) < 1e-3


def test_anchors_leave_room_for_a_block() -> None:
    a = pick_anchors(40, 0.25, 5, random.Random(0))
    assert a.numel() == 8 and int(a.max()) < 35 and a.tolist() == sorted(set(a.tolist()))


def test_bad_block_config_is_refused() -> None:
    from dspark_lsp.errors import UserError

    with pytest.raises(UserError, match="block_size"):
        FeatDraftConfig(d_model=D, n_heads=2, block_size=1)


def test_block_training_learns_resumes_and_exports_a_loadable_draft(tiny_models: tuple[Path, Path],
                                                                     tiny_target: Any, tmp_path: Path) -> None:
    from featdraft_testlib import write_shards

    from dspark_lsp.training.block_train import BlockTrainConfig, run

    vocab = int(tiny_target.config.vocab_size)
    hidden = int(tiny_target.config.hidden_size)
    write_shards(tiny_target, tmp_path / "feats", 3, 8, 40, 300)
    dv = DraftVocab(list(range(vocab)), vocab)
    init = FeatDraft(FeatDraftConfig(d_model=hidden, n_heads=4, d_ff=64, vocab_size=dv.size, target_vocab_size=vocab))
    save_feat_draft(tmp_path / "init", init, dv, {"step": 0}, dtype=torch.float32)
    cfg = BlockTrainConfig(name="b", runs_dir=tmp_path / "runs", init=tmp_path / "init", features=tmp_path / "feats",
                           target=str(tiny_models[0]), block_size=3, markov_rank=8, batch_size=4, lr=3e-3,
                           head_lr=1e-2, warmup_steps=5, max_steps=60, log_every=10, eval_every=60, threads=1)
    run(cfg)
    log = [json.loads(line) for line in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert steps[-1]["loss"] < 0.7 * steps[0]["loss"]
    val = [r["val"] for r in log if "val" in r]
    assert val and len(val[-1]["block_chain"]) == 2 and val[-1]["reliability"]
    assert steps[-1]["ce"][-1] < 0.7 * steps[0]["ce"][-1]  # the block's own loss falls too
    model, _, meta = load_feat_draft(cfg.run_dir / "export")
    assert meta["step"] == 60 and model.has_block and model.markov_in is not None and model.conf is not None
    cfg.max_steps = 65
    run(cfg)  # resumes from the checkpoint instead of starting over
    assert load_feat_draft(cfg.run_dir / "export")[2]["step"] == 65
    lines = (cfg.run_dir / "log.jsonl").read_text().splitlines()
    assert [r["step"] for r in map(json.loads, lines) if "loss" in r] == [10, 20, 30, 40, 50, 60]


def test_replay_reliability_bins_count_what_was_accepted() -> None:
    from dspark_lsp.bench.mode_ablation import reliability_bins

    rows = reliability_bins([(0.05, False, 0), (0.95, True, 0), (0.99, False, -1), (0.92, True, 17), (1.0, True, 0)])
    assert rows == [{"bin": 0, "count": 1, "confidence": 0.05, "accepted": 0.0},
                    {"bin": 9, "count": 4, "confidence": 0.965, "accepted": 0.75}]


def test_a_calibrated_token_pays_only_at_the_running_rate() -> None:
    from dspark_lsp.engine.scheduler import ConfidenceScheduler

    sched = ConfidenceScheduler(SchedulerConfig(verify_cost_ms={1: 10.0, 2: 10.0, 3: 14.0, 6: 26.0}))
    # Token 1 adds nothing to a 1-token verify (flat to 2 rows): free, whatever its odds.
    assert sched.pays_at_rate(1, 0.01, 0.0)
    # Token 2 adds 4 ms; at the prior acceptance (0.6) the best draft length earns 0.16 tokens/ms,
    # so it pays from p 0.64 on, where the forward-priced rule (pays) takes it from 0.4.
    assert not sched.pays_at_rate(2, 0.6, 0.0) and sched.pays(2, 0.6, 0.0)
    assert sched.pays_at_rate(2, 0.75, 0.0)


def test_platt_scaling_recovers_a_known_miscalibration() -> None:
    from dspark_lsp.training.block_train import fit_platt, fold_platt

    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g)
    labels = (torch.rand(20000, generator=g) < torch.sigmoid(2.0 * x + 1.0)).float()
    a, b = fit_platt(x, labels)
    assert abs(a - 2.0) < 0.15 and abs(b - 1.0) < 0.1
    model, _ = block_draft(6)
    h, prev = torch.randn(3, D), torch.tensor([2, 3, 4])
    before = model.confidence_logit(h, prev, 1, 2)
    fold_platt(model, a, b)
    assert torch.allclose(model.confidence_logit(h, prev, 1, 2), a * before + b, atol=1e-5)


def test_a_drafts_export_says_which_parts_it_uses(random_lm: Any, tmp_path: Path) -> None:
    from dspark_lsp.drafts.feature.source import load_feature_draft

    target = random_lm(0, vocab_size=16, hidden=D, layers=1)
    model, dv = block_draft(7)
    save_feat_draft(tmp_path / "d", model, dv, {"step": 1, "parts": {"confidence": False, "block": True}})
    src = load_feature_draft(tmp_path / "d", target, pack="off")
    assert src.supports_parallel and src._markov and not src.calibrated
    assert load_feature_draft(tmp_path / "d", target, pack="off", use_confidence=True).calibrated
    save_feat_draft(tmp_path / "e", model, dv, {"step": 1})
    assert load_feature_draft(tmp_path / "e", target, pack="off").calibrated  # no word: every part


def test_lookup_confidences_are_read_as_measured_acceptance_beside_a_calibrated_draft() -> None:
    from dspark_lsp.drafts.hybrid import LOOKUP_ACCEPTANCE
    from dspark_lsp.engine.draft import Proposal

    class Stub:
        name, supports_parallel, wants_features = "stub", False, False

        def __init__(self, calibrated: bool) -> None:
            self.calibrated = calibrated

        def reset(self) -> None:
            pass

        def propose(self, context: list[int], max_tokens: int, **_: Any) -> Proposal:
            return Proposal()

    ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3]  # "1 2 3" seen before: the lookup proposes "4 5 ..."
    plain = HybridDraftSource(Stub(False), NgramDraftSource()).propose(ctx, 3, parallel=True, tau=0.0)
    cal = HybridDraftSource(Stub(True), NgramDraftSource()).propose(ctx, 3, parallel=True, tau=0.0)
    assert plain.tokens == cal.tokens and plain.tokens[:2] == [4, 5]
    assert cal.confidence != plain.confidence
    assert all(c in LOOKUP_ACCEPTANCE.values() for c in cal.confidence)


@pytest.mark.parametrize("mode", ["ar", "parallel"])
def test_decode_records_which_slot_stated_each_confidence(random_lm: Any, mode: str) -> None:
    """Each judged token's recorded slot is the (kind, step) bias its confidence came from: with the probe
    zeroed and a distinct bias per slot, the confidence names the slot."""
    from dspark_lsp.engine.draft import NO_SLOT

    target = random_lm(3, vocab_size=16, hidden=D, layers=1)
    model, dv = block_draft(9)
    assert model.conf is not None and model.conf_step is not None
    with torch.no_grad():
        model.conf.zero_()
        model.conf_step.copy_(torch.linspace(0.5, 4.0, model.conf_step.numel()).view_as(model.conf_step))
    src = HybridDraftSource(FeatureDraftSource(model, dv, target.get_input_embeddings()), NgramDraftSource())
    prompt = [2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4]  # repeats: the lookup answers some rounds
    cfg = DecodeConfig(max_new_tokens=24, draft_mode=mode,  # type: ignore[arg-type]
                       scheduler=SchedulerConfig(k_max=5, verify_cost_ms={1: 10.0, 6: 30.0}))
    out = SpeculativeDecoder(target).generate(prompt, config=cfg, draft=src)
    cal = out.stats.calibration
    drafted = [(c, s) for c, _, s in cal if s != NO_SLOT]
    assert drafted, "the draft stated no confidence"
    flat = torch.sigmoid(model.conf_step.detach().flatten())
    for c, s in drafted:
        assert abs(c - float(flat[s])) < 1e-4
    if mode == "ar":
        assert all(s < model.conf_step.shape[1] for _, s in drafted)  # kind 0: chain steps only
    else:
        # A block's offsets state kind 1, step = offset (judged above only when the anchor landed).
        src.model_source.set_features(0, torch.randn(len(prompt) - 1, D))
        p = src.model_source.propose(prompt, 4, parallel=True, tau=0.0)
        n = model.conf_step.shape[1]
        assert p.slots == [0] + [n + i for i in range(1, len(p.tokens))] and len(p.tokens) == 4


def test_slot_platt_recovers_each_slots_bias_and_folds_into_the_head() -> None:
    from dspark_lsp.training.slot_platt import fit_slot_platt, fold_slot_platt

    g = torch.Generator().manual_seed(1)
    true_bias = {0: -1.0, 1: 0.5, 17: 2.0}
    xs, ys, ss = [], [], []
    for slot, b in true_bias.items():
        x = torch.randn(8000, generator=g)
        xs.append(x)
        ys.append((torch.rand(8000, generator=g) < torch.sigmoid(1.5 * x + b)).float())
        ss.append(torch.full((8000,), slot))
    # A slot seen three times stays near the global bias instead of jumping to its own few labels.
    xs.append(torch.zeros(3))
    ys.append(torch.ones(3))
    ss.append(torch.full((3,), 5))
    fit = fit_slot_platt(torch.cat(xs), torch.cat(ys), torch.cat(ss))
    assert abs(fit.a - 1.5) < 0.1
    for slot, b in true_bias.items():
        assert abs(fit.bias[slot] - b) < 0.15, (slot, fit.bias[slot])
    assert abs(fit.bias[5] - fit.b) < 0.6 and fit.counts[5] == 3
    model, _ = block_draft(6)
    h, prev = torch.randn(3, D), torch.tensor([2, 3, 4])
    before = {(k, s): model.confidence_logit(h, prev, k, s) for k, s in [(0, 0), (0, 1), (1, 1), (1, 9)]}
    fold_slot_platt(model, fit)
    for (k, s), z in before.items():
        want = fit.a * z + fit.bias.get(model.confidence_slot(k, s), fit.b)
        assert torch.allclose(model.confidence_logit(h, prev, k, s), want, atol=1e-5)


def test_ablation_variants_name_every_part_whatever_the_export_ships(random_lm: Any, tmp_path: Path) -> None:
    """A draft shipped with its heads off (vocab.json "parts") must still be ablated with them on where a
    variant says so: the +conf variants ran without the confidence head before."""
    from dspark_lsp.bench.mode_ablation import ablation_variants

    target = random_lm(0, vocab_size=16, hidden=D, layers=1)
    model, dv = block_draft(8)
    save_feat_draft(tmp_path / "d", model, dv,
                    {"step": 1, "parts": {"block": False, "markov": False, "confidence": False}})
    variants = ablation_variants(tmp_path / "d", target, lambda s: s)
    want = {  # variant: (block, markov, confidence)
        "ar": (False, False, False), "ar+markov": (False, True, False), "ar+conf": (False, False, True),
        "parallel": (True, True, False), "parallel-nomarkov": (True, False, False), "semi": (True, True, False),
        "semi+conf": (True, True, True), "parallel+conf": (True, True, True), "fixed_k4-ar": (False, False, False),
    }
    for name, (block, markov, conf) in want.items():
        src = variants[name].draft
        assert isinstance(src, FeatureDraftSource)
        assert (src.supports_parallel, src._markov, src.calibrated) == (block, markov, conf), name


def test_folding_a_fit_with_a_no_slot_bias_leaves_the_last_slot_alone() -> None:
    from dspark_lsp.training.slot_platt import SlotPlatt, fold_slot_platt

    model, _ = block_draft(6)
    assert model.conf_step is not None
    before = model.conf_step.detach().clone()
    fold_slot_platt(model, SlotPlatt(a=1.0, b=0.25, bias={-1: 5.0}, counts={-1: 40}))
    assert torch.allclose(model.conf_step, before + 0.25)
