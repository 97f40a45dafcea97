"""Hyper-parameters of the draft network (saved as ``draft_config.json`` beside the weights)."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_lsp.drafts.blocks import BlockConfig
from dspark_lsp.errors import UserError


@dataclass
class DraftNetConfig(BlockConfig):
    """Shape of a small Llama/Qwen2-style causal transformer with tied embeddings.

    ``vocab_size`` is the *reduced* draft vocabulary (FR-Spec): UNK, MASK, then the target tokens kept.
    ``n_parallel`` is how many tokens one masked parallel step can propose (1 real + n-1 masks).
    ``max_context`` is the longest context the draft looks at; longer contexts keep their tail, because
    the network was trained on windows of about that length.
    """

    vocab_size: int = 8194
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 704
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    n_parallel: int = 4
    max_context: int = 384
    target_vocab_size: int = 151936

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise UserError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if (self.d_model // self.n_heads) % 2:
            raise UserError("the head dimension must be even (rotary embeddings)")
        if self.n_parallel < 1:
            raise UserError("n_parallel must be at least 1")
