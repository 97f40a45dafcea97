"""``FeatureDraftSource``: the feature draft behind the engine's ``DraftSource`` protocol.

The decode loop hands it the target's features (``set_features``) before each draft call: row i is the
target's last hidden state at context position ``start + i``; they cover every position the target has
run, i.e. all of the context but its last token. Draft position j reads (f_j, token j+1) and predicts
token j+2, so the true positions give the first proposal directly; each further token feeds the draft's
own predicted feature back in. Context tokens past the features (a lookup's proposal earlier in the same
round) are chained the same way.

Its KV cache holds true positions only and is re-synced by longest common prefix, like the token
draft's; keys of drafted steps are dropped at the end of each call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dspark_lsp.draftnet.vocab import DraftVocab, draft_runner_ups, pick_token
from dspark_lsp.engine.draft import Proposal, window_start
from dspark_lsp.engine.prefix_cache import common_prefix_len
from dspark_lsp.errors import ModelError
from dspark_lsp.featdraft.io import load_feat_draft
from dspark_lsp.featdraft.model import FeatDraft


class FeatureDraftSource:
    supports_parallel = False
    wants_features = True

    def __init__(self, model: FeatDraft, vocab: DraftVocab, embed: Any, name: str = "feature-draft") -> None:
        """``embed``: the target's input embedding module (token ids -> [.., d]); the draft reads its
        inputs through the target's own table, which is not stored with the draft."""
        self.model, self.vocab, self.embed, self.name = model.eval(), vocab, embed, name
        self.max_context = model.cfg.max_context
        self._dtype = model.norm_e.weight.dtype
        self._device = model.norm_e.weight.device
        self.reset()

    def reset(self) -> None:
        self._cache = self.model.new_cache()
        self._seen: list[int] = []  # token j+1 for each cached draft position j = start, start+1, ...
        self._start = 0
        self._feat_start = 0
        self._feats: torch.Tensor | None = None

    def set_features(self, start: int, feats: torch.Tensor) -> None:
        self._feat_start, self._feats = start, feats

    def _step(self, tokens: list[int], feats: torch.Tensor, first_pos: int) -> torch.Tensor:
        """Run draft positions first_pos.. on the cache; returns the last predicted feature [d]."""
        with torch.inference_mode():
            emb = self.embed(torch.tensor([tokens], dtype=torch.long, device=self._device))
            pos = torch.arange(first_pos, first_pos + len(tokens), device=self._device)[None]
            g = self.model(emb, feats[None].to(self._device, self._dtype), pos, None, self._cache)
        return g[0, -1]

    @torch.inference_mode()
    def propose(
        self,
        context: list[int],
        max_tokens: int,
        *,
        parallel: bool,
        tau: float,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        out = Proposal(dists=[] if temperature > 0 else None, alternates=None if temperature > 0 else [])
        feats = self._feats
        if max_tokens <= 0 or feats is None:
            return out
        n_ctx = len(context)
        true_end = min(self._feat_start + int(feats.shape[0]), n_ctx - 1)  # positions with true features
        start = self._feat_start + window_start(true_end - self._feat_start, self.max_context)
        if true_end <= start:
            return out
        if start != self._start:
            self._cache = self.model.new_cache()
            self._seen, self._start = [], start
        toks = context[start + 1 : true_end + 1]
        keep = min(common_prefix_len(self._seen, toks), len(toks) - 1)
        self._cache.crop(keep)
        lo = start + keep - self._feat_start
        g = self._step(toks[keep:], feats[lo : lo + len(toks) - keep], start + keep)
        self._seen = list(toks)
        pos = true_end
        try:
            for j in range(true_end, n_ctx - 1):  # context the target has not run yet
                g = self._step([context[j + 1]], g[None], j)
                out.forwards += 1
                pos = j + 1
            out.forwards += 1
            while True:
                logits = self.model.logits(g)
                tok, p, dist = pick_token(self.vocab, logits, temperature, generator)
                out.tokens.append(tok)
                out.confidence.append(p)
                if out.dists is not None and dist is not None:
                    out.dists.append(dist)
                if out.alternates is not None:
                    out.alternates.append(draft_runner_ups(self.vocab, logits))
                if len(out.tokens) >= max_tokens or p < tau:
                    return out
                g = self._step([tok], g[None], pos)
                pos += 1
                out.forwards += 1
        finally:
            self._cache.crop(len(self._seen))  # keys of guessed features are not context


def draft_dtype() -> torch.dtype:
    """bf16 where the CPU has native bf16 (a draft's rounding changes only its guesses, never the
    output), else fp32. Measured on the 2-core EPYC, one draft step on a 300-token context: fp32 5.9 ms,
    fp32 packed 3.8, bf16 2.9, bf16 packed 2.0 (a target forward is ~75-110 ms)."""
    from dspark_lsp.models.loader import cpu_has_native_bf16

    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def load_feature_draft(
    path: str | Path, target: Any, dtype: torch.dtype | None = None, pack: str = "auto"
) -> FeatureDraftSource:
    """Load a feature draft for ``target``; it must be the target the draft was trained on (same hidden
    size and vocabulary), since the draft reads that target's hidden states."""
    from dspark_lsp.models.packing import pack_linears

    model, vocab, _meta = load_feat_draft(Path(path), dtype or draft_dtype())
    hidden = int(getattr(target.config, "hidden_size", -1))
    vocab_size = int(getattr(target.config, "vocab_size", -1))
    if hidden != model.cfg.d_model or vocab_size != vocab.target_vocab_size:
        raise ModelError(
            f"feature draft {Path(str(path)).name} reads a target with hidden size {model.cfg.d_model} and "
            f"{vocab.target_vocab_size} tokens; this target has {hidden} and {vocab_size}: use it with the "
            "target it was trained for, or pick another draft (draftModel)"
        )
    device = next(target.parameters()).device
    model.to(device)  # it reads the target's features and embeddings where they are
    if device.type == "cpu" and not _quantize(model):
        pack_linears(model, pack)
    return FeatureDraftSource(model, vocab, target.get_input_embeddings(), name=Path(str(path)).name)


def _quantize(model: FeatDraft) -> bool:
    """On the CPU, an fp32 draft's products go through the quantized kernel in int8 (quant/requantize.py:
    its guesses, not the output, carry the rounding). Measured on the 2-core EPYC, one thread, a 4-token
    proposal on a 300-token context: 58.5 ms fp32 packed, 19.7 ms int8, the same tokens on 48 of 48.
    False (and nothing changed) where the kernel is unavailable or the draft runs in bf16."""
    from dspark_lsp.quant.build import KernelUnavailable, load_kernel
    from dspark_lsp.quant.requantize import quantize_linears

    if model.norm_e.weight.dtype != torch.float32:
        return False
    try:
        load_kernel()
    except KernelUnavailable:
        return False
    return quantize_linears(model) > 0
