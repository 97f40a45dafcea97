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

from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.io import load_feat_draft
from dspark_lsp.drafts.vocab import DraftVocab, append_pick
from dspark_lsp.engine.draft import DraftSource, Proposal, window_start
from dspark_lsp.engine.prefix_cache import common_prefix_len
from dspark_lsp.errors import ModelError


class FeatureDraftSource(DraftSource):
    wants_features = True

    def __init__(self, model: FeatDraft, vocab: DraftVocab, embed: Any, name: str = "feature-draft",
                 *, use_block: bool = True, use_markov: bool = True, use_confidence: bool = True) -> None:
        """``embed``: the target's input embedding module (token ids -> [.., d]); the draft reads its
        inputs through the target's own table, which is not stored with the draft.

        ``use_block`` / ``use_markov`` / ``use_confidence``: whether the draft's block step, Markov
        head and confidence head (when it has them) are used; off for the ablations in the bench."""
        self.model, self.vocab, self.embed, self.name = model.eval(), vocab, embed, name
        self.max_context = model.cfg.max_context
        self._dtype = model.norm_e.weight.dtype
        self._device = model.norm_e.weight.device
        # A parallel step exists only where the draft has a trained block; the decoder then sends it the
        # non-key stretches (semi-autoregressive) and asks key positions one token at a time.
        self.supports_parallel = use_block and model.has_block
        self._markov = use_markov and model.markov_in is not None
        # A confidence head predicts acceptance itself, calibrated on held-out rounds: its numbers are
        # probabilities the decoder's cost rule can weigh directly (``calibrated``).
        self.calibrated = use_confidence and model.conf is not None
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

    def _prev(self, token: int) -> torch.Tensor:
        return self.vocab.to_draft[token].to(self._device)

    def _pick(self, out: Proposal, head_logits: torch.Tensor, g: torch.Tensor, prev: int, kind: int, step: int,
              temperature: float, generator: torch.Generator | None) -> float:
        """Choose one token from ``head_logits`` (plus the Markov bias for ``prev``), append it to
        ``out`` and return its confidence: the confidence head's, or the draft's own probability."""
        prev_t = self._prev(prev)
        bias = self.model.markov(prev_t) if self._markov else None
        logits = head_logits if bias is None else head_logits + bias.to(head_logits.dtype)
        p = append_pick(out, self.vocab, logits, temperature, generator)
        if self.calibrated:
            p = out.confidence[-1] = float(torch.sigmoid(self.model.confidence_logit(g, prev_t, kind, step).float()))
            out.slots[-1] = self.model.confidence_slot(kind, step)
        return p

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
        out = Proposal.empty(temperature)
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
        try:
            if parallel and self.supports_parallel and true_end == n_ctx - 1:
                return self._block(out, g, context, true_end, max_tokens, tau, temperature, generator)
            return self._chain(out, g, context, true_end, max_tokens, tau, temperature, generator)
        finally:
            self._cache.crop(len(self._seen))  # keys of guessed features are not context

    def _chain(self, out: Proposal, g: torch.Tensor, context: list[int], true_end: int, max_tokens: int,
               tau: float, temperature: float, generator: torch.Generator | None) -> Proposal:
        """Autoregressive drafting: each further token feeds the draft's predicted feature back in."""
        n_ctx = len(context)
        pos = true_end
        for j in range(true_end, n_ctx - 1):  # context the target has not run yet
            g = self._step([context[j + 1]], g[None], j)
            out.forwards += 1
            pos = j + 1
        out.forwards += 1
        prev = context[-1]
        while True:
            p = self._pick(out, self.model.logits(g), g, prev, 0, len(out.tokens), temperature, generator)
            if len(out.tokens) >= max_tokens or p < tau:
                return out
            prev = out.tokens[-1]
            g = self._step([prev], g[None], pos)
            pos += 1
            out.forwards += 1

    def _block(self, out: Proposal, g: torch.Tensor, context: list[int], true_end: int, max_tokens: int,
               tau: float, temperature: float, generator: torch.Generator | None) -> Proposal:
        """One parallel block: the anchor's token from the true features, then offsets 1.. in one more draft
        forward (offset 1 reads the anchor's token, the rest learned stand-ins), chained by the Markov
        head; stops at the first token below ``tau``."""
        out.forwards += 1
        p = self._pick(out, self.model.logits(g), g, context[-1], 0, 0, temperature, generator)
        n = min(max_tokens - 1, self.model.cfg.block_size - 1)
        if n <= 0 or p < tau:
            return out
        first = self.embed(torch.tensor([out.tokens[0]], dtype=torch.long, device=self._device))[0]
        x = self.model.block_inputs(n, g, first)[None]
        # The anchor is draft position true_end - 1; offset i sits at true_end - 1 + i.
        pos = torch.arange(true_end, true_end + n, device=self._device)[None]
        h = self.model.body(x, pos, None, self._cache)[0]
        head = self.model.logits(h)
        out.forwards += 1
        for i in range(n):
            p = self._pick(out, head[i], h[i], out.tokens[-1], 1, i + 1, temperature, generator)
            if p < tau:
                break
        return out


def draft_dtype(device: str = "cpu") -> torch.dtype:
    """On the CPU: fp32 where the quantized kernel builds (its linears then run in int8 through it, see
    :func:`_quantize`), else bf16 where the CPU has native bf16, else fp32. A draft's rounding changes
    only its guesses, never the output. Measured on the 2-core Zen 4 host (AVX512-BF16), 2 threads, one
    step on a 300-token context, fastest of 30: bf16 packed 3.63 ms, int8 1.77 ms (a 4-token parallel
    block 7.16 vs 4.66 ms), against a ~17 ms one-token target forward."""
    from dspark_lsp.models.loader import cpu_has_native_bf16
    from dspark_lsp.quant.build import kernel_available

    if device == "cpu" and kernel_available():
        return torch.float32
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def load_feature_draft(
    path: str | Path, target: Any, dtype: torch.dtype | None = None, pack: str = "auto", *,
    use_block: bool | None = None, use_markov: bool | None = None, use_confidence: bool | None = None,
) -> FeatureDraftSource:
    """Load a feature draft for ``target``; it must be the target the draft was trained on (same hidden
    size and vocabulary), since the draft reads that target's hidden states."""
    from dspark_lsp.models.packing import pack_linears

    device = next(target.parameters()).device
    model, vocab, meta = load_feat_draft(Path(path), dtype or draft_dtype(device.type))
    # Which of its parts a draft uses unless told: its export says (``"parts"`` in vocab.json, set when
    # it ships from what its ablation measured); all of them when it does not.
    parts = meta.get("parts")
    default = parts if isinstance(parts, dict) else {}

    def part(name: str, given: bool | None) -> bool:
        return bool(default.get(name, True)) if given is None else given

    hidden = int(getattr(target.config, "hidden_size", -1))
    vocab_size = int(getattr(target.config, "vocab_size", -1))
    if hidden != model.cfg.width or vocab_size != vocab.target_vocab_size:
        raise ModelError(
            f"feature draft {Path(str(path)).name} reads a target with hidden size {model.cfg.width} and "
            f"{vocab.target_vocab_size} tokens; this target has {hidden} and {vocab_size}: use it with the "
            "target it was trained for, or pick another draft (draftModel)"
        )
    model.to(device)  # it reads the target's features and embeddings where they are
    if device.type == "cpu" and not _quantize(model):
        pack_linears(model, pack)
    return FeatureDraftSource(model, vocab, target.get_input_embeddings(), name=Path(str(path)).name,
                              use_block=part("block", use_block), use_markov=part("markov", use_markov),
                              use_confidence=part("confidence", use_confidence))


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
