"""Our own fp32 weights in the kernel's int8 layout (quant/requantize.py): the feature draft's products."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.feature.source import FeatureDraftSource, load_feature_draft
from dspark_lsp.drafts.io import save_feat_draft
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.quant.build import ENV_DISABLE, KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import QuantLinear
from dspark_lsp.quant.requantize import q8_packed, quantize_linears

D = 32  # the kernel's groups are 32 inputs wide


@pytest.fixture(scope="module", autouse=True)
def _kernel() -> None:
    try:
        load_kernel()
    except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
        pytest.skip(f"the quantized kernel is unavailable here: {exc}")


def test_q8_codes_rebuild_each_weight_within_half_a_step() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 96, generator=g) * torch.logspace(-3, 0, 96)  # groups of very different ranges
    w[5, 32:64] = 0.0  # an all-zero group: scale 0, codes 0
    p = q8_packed(w)
    assert p.kind == 8 and p.codes.dtype == np.int8 and p.scale.shape == (48, 3) and p.off.size == 0
    assert np.abs(p.codes.astype(np.int32)).max() == 127  # every group's largest weight is code +-127
    step = np.repeat(p.scale, 32, axis=1)
    err = np.abs(p.values() - w.numpy())
    assert (err <= step / 2 + 1e-7).all()
    assert p.scale[5, 1] == 0.0 and (p.values()[5, 32:64] == 0.0).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        q8_packed(torch.zeros(4, 40))


def test_quantized_linear_computes_with_the_int8_values() -> None:
    g = torch.Generator().manual_seed(1)
    lin = nn.Linear(64, 40, bias=True)
    x = torch.randn(3, 64, generator=g)
    q = QuantLinear(q8_packed(lin.weight), lin.bias)
    want = x @ torch.from_numpy(q8_packed(lin.weight).values()).T + lin.bias
    # The kernel's decode path rounds each group of 32 activations to int16 steps (~1.5e-5 relative).
    torch.testing.assert_close(q(x), want.detach(), atol=2e-4, rtol=2e-4)
    # ... and the int8 weights are close to, but not, the fp32 ones.
    assert not torch.equal(q(x), lin(x).detach())
    torch.testing.assert_close(q(x), lin(x).detach(), atol=5e-2, rtol=5e-2)


def _tiny_draft(seed: int, vocab: int = 16) -> tuple[FeatDraft, DraftVocab]:
    torch.manual_seed(seed)
    dv = DraftVocab(list(range(vocab)), vocab)
    model = FeatDraft(FeatDraftConfig(d_model=D, n_heads=2, d_ff=2 * D, vocab_size=dv.size, target_vocab_size=vocab))
    with torch.no_grad():
        model.head.weight.mul_(20.0)
    return model.eval(), dv


def test_every_linear_of_a_feature_draft_is_swapped() -> None:
    model, _ = _tiny_draft(0)
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert quantize_linears(model) == n_linear > 0
    assert not any(type(m) is nn.Linear for m in model.modules())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_quantized_feature_draft_stays_lossless(random_lm: Any, greedy_reference: Any, seed: int) -> None:
    target = random_lm(seed, vocab_size=16, hidden=D, layers=1)
    model, dv = _tiny_draft(seed)
    quantize_linears(model)
    src = FeatureDraftSource(model, dv, target.get_input_embeddings())
    prompt = torch.randint(0, 16, (9,), generator=torch.Generator().manual_seed(seed)).tolist()
    out = SpeculativeDecoder(target).generate(
        prompt, config=DecodeConfig(max_new_tokens=14, scheduler=SchedulerConfig(fixed_k=3)), draft=src
    )
    assert out.tokens == greedy_reference(target, prompt, 14)
    assert out.stats.draft_forwards > 0


def test_load_feature_draft_quantizes_on_the_cpu_unless_the_kernel_is_off(
    random_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = random_lm(3, vocab_size=16, hidden=D, layers=1)
    model, dv = _tiny_draft(3)
    save_feat_draft(tmp_path / "d", model, dv, {"step": 1}, dtype=torch.float32)
    src = load_feature_draft(tmp_path / "d", target, dtype=torch.float32)
    assert isinstance(src.model.fc, QuantLinear) and isinstance(src.model.head, QuantLinear)
    monkeypatch.setenv(ENV_DISABLE, "1")
    plain = load_feature_draft(tmp_path / "d", target, dtype=torch.float32)
    assert not any(isinstance(m, QuantLinear) for m in plain.model.modules())


def test_default_draft_dtype_is_the_int8_kernel_on_the_cpu_even_with_native_bf16(
    random_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a dtype the draft loads in fp32 and goes through the kernel in int8 wherever the kernel
    builds — also on a CPU with native bf16, where bf16 packed was 2x slower per step (3.63 vs 1.77 ms,
    Zen 4). With the kernel off, such a CPU still gets bf16."""
    import dspark_lsp.models.loader as loader
    from dspark_lsp.drafts.feature.source import draft_dtype

    monkeypatch.setattr(loader, "cpu_has_native_bf16", lambda: True)
    target = random_lm(4, vocab_size=16, hidden=D, layers=1)
    model, dv = _tiny_draft(4)
    save_feat_draft(tmp_path / "d", model, dv, {"step": 1}, dtype=torch.float32)
    assert draft_dtype() == torch.float32
    src = load_feature_draft(tmp_path / "d", target)
    assert isinstance(src.model.head, QuantLinear)
    monkeypatch.setenv(ENV_DISABLE, "1")
    assert draft_dtype() == torch.bfloat16
    assert draft_dtype("cuda") == torch.bfloat16
