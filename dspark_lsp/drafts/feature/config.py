"""Shape of the feature draft (saved as ``feat_config.json`` beside the weights)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dspark_lsp.drafts.blocks import BlockConfig
from dspark_lsp.errors import UserError


@dataclass
class FeatDraftConfig(BlockConfig):
    """``feat_dim`` is the target's hidden size (the draft reads and predicts target features); 0 means
    ``d_model``, the shape of every draft before the 1.5B's. A narrower layer (``d_model < feat_dim``)
    maps the inputs down in ``fc`` and its output back up through ``out``: the layer's cost then follows
    ``d_model`` while what it predicts stays in the target's feature space (the 1.5B draft starts from
    the 0.5B's trained 896-wide layer, training/transfer.py).

    ``vocab_size`` is the reduced output vocabulary (UNK, MASK, then kept target ids, as the token draft);
    inputs use the target's own full embedding table, which is not stored with the draft.
    ``n_layers`` decoder layers (EAGLE uses one: its inputs already hold the target's whole computation).

    The block step and its heads (docs/ALGORITHM.md; 0/False = absent, so older drafts load unchanged):
    ``block_size`` positions per parallel block (the anchor, read from true features, plus
    ``block_size - 1`` masked positions with learned inputs, all in one draft forward);
    ``markov_rank`` the rank of the Markov head that adds ``W2 · W1[previous token]`` to each
    position's logits, chaining a parallel block's guesses; ``confidence_head`` a logistic head on
    ``[h; W1[previous]]`` that predicts whether the target will accept the position's token.
    """

    d_model: int = 896
    n_heads: int = 14
    d_ff: int = 2432
    n_layers: int = 1
    vocab_size: int = 8194
    target_vocab_size: int = 151936
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    max_context: int = 1024
    block_size: int = 0
    markov_rank: int = 0
    confidence_head: bool = False
    feat_dim: int = 0
    KIND: ClassVar[str] = "feature draft"

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise UserError("d_model must split into n_heads heads of even size")
        if self.n_layers < 1:
            raise UserError("the feature draft needs at least one layer")
        if self.block_size < 0 or self.block_size == 1 or self.block_size > 16:
            raise UserError("block_size must be 0 (no block step) or 2..16")
        if self.markov_rank < 0:
            raise UserError("markov_rank must be >= 0")
        if self.feat_dim < 0:
            raise UserError("feat_dim must be >= 0 (0: the same as d_model)")

    @property
    def width(self) -> int:
        """The size of the target features the draft reads and predicts."""
        return self.feat_dim or self.d_model
