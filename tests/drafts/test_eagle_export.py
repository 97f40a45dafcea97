"""The EAGLE export (dspark_lsp/drafts/eagle.py) on a small random feature draft: the checkpoint's math
(vLLM's EAGLE-1 layer, written out in torch) equals our draft's forward wherever the export is exact —
with the two rms divisions it replaces by constants made constant — and the files carry the names and
config vLLM's loader reads. Fast: no target model."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dspark_lsp.drafts.eagle import (
    Constants,
    eagle_config,
    eagle_forward,
    eagle_state,
    measure,
    measure_constants,
    second_step_mask,
    tune_state,
)
from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.vocab import DraftVocab

D, V = 32, 50
CFG = FeatDraftConfig(d_model=D, n_heads=4, d_ff=48, n_layers=1, vocab_size=12, target_vocab_size=V, max_context=64)


class ConstNorm(nn.Module):
    """x * weight * c: an RMSNorm whose 1/rms is the constant the export uses."""

    def __init__(self, weight: torch.Tensor, c: float) -> None:
        super().__init__()
        self.weight, self.c = weight, c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() * self.c * self.weight


def random_draft(seed: int = 0) -> FeatDraft:
    torch.manual_seed(seed)
    model = FeatDraft(CFG)
    with torch.no_grad():
        block: Any = model.blocks[0]
        for norm in (model.norm_e, model.norm_f, block.norm1, block.norm2):
            norm.weight.uniform_(0.5, 1.5)  # not ones: a weight folded in the wrong place shows
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(5)
    return model.eval()


def test_the_exported_layer_is_our_layer_where_the_export_is_exact() -> None:
    draft = random_draft()
    embed = torch.randn(V, D) * 0.3
    consts = Constants(feature_scale=0.7, attn_scale=1.3, tokens=0)
    state = eagle_state(draft, embed, consts)
    cfg = eagle_config(draft.cfg, {"vocab_size": V, "max_position_embeddings": 512})
    # Our draft with the two replaced norms made exactly what the export assumes.
    ours = copy.deepcopy(draft)
    ours.norm_f = ConstNorm(draft.norm_f.weight, consts.feature_scale)  # type: ignore[assignment]
    block: Any = draft.blocks[0]
    ours_block: Any = ours.blocks[0]
    ours_block.norm1 = ConstNorm(block.norm1.weight, consts.attn_scale)
    ids, feats, pos = torch.randint(0, V, (9,)), torch.randn(9, D), torch.arange(3, 12)
    with torch.inference_mode():
        want = ours(embed[ids][None], feats[None], pos[None])[0]
        got = eagle_forward(state, cfg, ids, feats, pos)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()
    # ... and not equal to the real draft (the approximation is real, and the test can tell).
    with torch.inference_mode():
        real = draft(embed[ids][None], feats[None], pos[None])[0]
    assert not torch.allclose(got, real, atol=1e-3)


def test_the_embedding_table_is_normalised_exactly() -> None:
    draft = random_draft(1)
    embed = torch.randn(V, D) * 3
    state = eagle_state(draft, embed, Constants(1.0, 1.0, 0))
    with torch.inference_mode():
        assert torch.allclose(state["embed_tokens.weight"], draft.norm_e(embed), atol=1e-5)


def test_checkpoint_names_and_config_are_what_vllm_loads() -> None:
    draft = random_draft()
    state = eagle_state(draft, torch.randn(V, D), Constants(1.0, 1.0, 0))
    assert set(state) == {
        "embed_tokens.weight", "fc.weight",
        *(f"layers.0.self_attn.{n}_proj.weight" for n in "qkvo"),
        "layers.0.post_attention_layernorm.weight",
        *(f"layers.0.mlp.{n}_proj.weight" for n in ("gate", "up", "down")),
    }  # no input_layernorm (vLLM's EAGLE-1 layer 0 has none) and no lm_head (it shares the target's)
    assert state["fc.weight"].shape == (D, 2 * D) and state["layers.0.mlp.gate_proj.weight"].shape == (48, D)
    cfg = eagle_config(draft.cfg, {"vocab_size": V})
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert cfg["vocab_size"] == V and cfg["rope_theta"] == CFG.rope_theta and cfg["head_dim"] == D // 4
    json.dumps(cfg)


def test_a_two_layer_draft_is_refused() -> None:
    from dspark_lsp.errors import UserError

    two = FeatDraft(FeatDraftConfig(d_model=D, n_heads=4, d_ff=48, n_layers=2, vocab_size=12, target_vocab_size=V))
    with pytest.raises(UserError, match="one decoder layer"):
        eagle_state(two, torch.randn(V, D), Constants(1.0, 1.0, 0))


def test_constants_are_exact_for_constant_rms() -> None:
    draft = random_draft()
    f = torch.randn(2, 7, D)
    f = f / f.pow(2).mean(-1, keepdim=True).sqrt() * 2.0  # every feature has rms 2
    consts = measure_constants(draft, [f[0], f[1]], [torch.randn(7, D), torch.randn(7, D)])
    assert consts.feature_scale == pytest.approx(0.5, rel=1e-4) and consts.tokens == 14


def test_second_step_mask() -> None:
    m = second_step_mask(3)
    assert m[:3, :3].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert m[4].tolist() == [True, True, False, False, True, False]  # drafted after true 1: true 0..1, itself


def test_measure_counts_against_the_targets_tokens() -> None:
    """With a target 'lm_head' equal to our head scattered to the target ids and exact constants the
    EAGLE side must agree with ours on the first proposal wherever the norms are constant."""
    draft = random_draft(2)
    vocab = DraftVocab(list(range(10, 20)), V)
    embed = torch.randn(V, D)
    consts = Constants(1.0, 1.0, 0)
    state = eagle_state(draft, embed, consts)
    cfg = eagle_config(draft.cfg, {"vocab_size": V})
    head = torch.full((V, D), 0.0)
    head[vocab.target_ids] = draft.head.weight[2:].detach()
    ids = torch.randint(0, V, (12,))
    feats = torch.randn(12, D)
    with torch.inference_mode():
        g = draft(embed[ids[1:11]][None], feats[:10][None], torch.arange(10)[None])[0]
        logits = draft.head(g)
        logits[:, :2] = float("-inf")
        greedy = torch.zeros(12, dtype=torch.long)
        greedy[1:11] = vocab.to_target[logits.argmax(-1)]  # a "target" that always agrees with our draft
    fid = measure(draft, vocab, embed, state, cfg, head, [(ids, feats, greedy)])
    assert fid.positions == 10 and fid.ours_first_accept == 1.0
    assert 0.0 <= fid.eagle_first_accept <= 1.0 and 0.0 <= fid.ours_second_accept <= fid.ours_first_accept


def test_export_refuses_a_token_draft(tmp_path: Path) -> None:
    from dspark_lsp.cli import main

    (tmp_path / "d").mkdir()
    assert main(["export-eagle", str(tmp_path / "out"), "--draft", str(tmp_path / "d")]) == 2


def test_tuning_in_the_eagle_math_fits_the_targets_tokens() -> None:
    """`--tune-steps`: the exported tensors trained in vLLM's EAGLE-1 math move its first proposals towards
    the target's greedy tokens (here those of another EAGLE layer, which the math can express exactly);
    the embedding table stays the export's, the names and shapes stay what vLLM loads."""
    draft = random_draft(3)
    embed = torch.randn(V, D)
    with torch.inference_mode():  # as the export makes them
        state = eagle_state(draft, embed, Constants(0.5, 0.5, 0))
    cfg = eagle_config(draft.cfg, {"vocab_size": V})
    teacher = eagle_state(random_draft(4), embed, Constants(0.5, 0.5, 0))
    head = torch.randn(V, D)
    seqs = []
    for _ in range(4):
        ids, feats = torch.randint(0, V, (40,)), torch.randn(40, D)
        with torch.inference_mode():
            g = eagle_forward(teacher, cfg, ids[1:39], feats[:38], torch.arange(38))
            greedy = torch.zeros(40, dtype=torch.long)
            greedy[1:39] = (g @ head.T).argmax(-1)
            seqs.append((ids.clone(), feats.clone(), greedy))  # greedy: an inference tensor, as in the export

    def first_right(s: dict[str, torch.Tensor]) -> float:
        with torch.inference_mode():
            hits = [((eagle_forward(s, cfg, i[1:39], f[:38], torch.arange(38)) @ head.T).argmax(-1) == gr[1:39])
                    .float().mean() for i, f, gr in seqs]
        return float(torch.stack(hits).mean())

    tuned, losses = tune_state(state, cfg, head, seqs, steps=60, lr=3e-3, window=32)
    assert set(tuned) == set(state) and all(tuned[k].shape == state[k].shape for k in state)
    assert torch.equal(tuned["embed_tokens.weight"], state["embed_tokens.weight"].float())
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    assert first_right(tuned) > first_right(state) + 0.2


def test_calibration_windows_per_text_are_capped() -> None:
    from dspark_lsp.drafts.eagle import calibration_ids

    class Tok:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [ord(c) for c in text]

    texts = ["a" * 100, "b" * 100, "c" * 100]
    assert [w[0] for w in calibration_ids(Tok(), texts, 150, window=20)] == [97] * 5 + [98] * 3
    assert [w[0] for w in calibration_ids(Tok(), texts, 150, window=20, per_text=2)] == [97, 97, 98, 98, 99, 99]
