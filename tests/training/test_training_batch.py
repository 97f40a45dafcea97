"""The joint AR + masked-parallel batch trains exactly what inference asks for."""

from __future__ import annotations

import random

import torch

from dspark_lsp.drafts.token.config import DraftNetConfig
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.vocab import MASK_ID, DraftVocab
from dspark_lsp.training.batch import IGNORE, build_batch, pick_anchors
from dspark_lsp.training.samples import Sample


def setup() -> tuple[DraftNet, DraftVocab, list[Sample]]:
    torch.manual_seed(0)
    vocab = DraftVocab(list(range(10, 60)), 100)
    model = DraftNet(DraftNetConfig(vocab_size=vocab.size, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                                    n_parallel=4, target_vocab_size=100)).eval()
    rng = random.Random(0)
    samples = [Sample([rng.randrange(10, 70) for _ in range(n)], ms) for n, ms in ((20, 8), (13, 0))]
    return model, vocab, samples


def test_mask_positions_see_what_inference_sees_and_real_tokens_never_see_masks() -> None:
    model, vocab, samples = setup()
    batch = build_batch(random.Random(1), samples, vocab.to_draft, seq_len=24, n_parallel=4, anchors=3)
    with torch.no_grad():
        logits = model(batch.ids, batch.positions, batch.mask)
    for r, s in enumerate(samples):
        ids = vocab.to_draft[torch.tensor(s.tokens)]
        with torch.no_grad():
            plain = model(ids[None], torch.arange(len(ids))[None])[0]
        # Real positions: identical to a plain causal forward (mask blocks do not leak into them).
        torch.testing.assert_close(logits[r, : len(ids)], plain, atol=1e-4, rtol=1e-4)
        for i in range(3):
            start = 24 + i * 3
            a = int(batch.positions[r, start]) - 1  # the anchor: the last real token the block sees
            inf_ids = torch.cat([ids[: a + 1], torch.full((3,), MASK_ID)])
            with torch.no_grad():
                inf = model(inf_ids[None], torch.arange(len(inf_ids))[None])[0, a + 1 :]
            torch.testing.assert_close(logits[r, start : start + 3], inf, atol=1e-4, rtol=1e-4)
            # The j-th mask is labelled with token a+2+j (the first proposal comes from position a).
            for j in range(3):
                want = int(ids[a + 2 + j]) if a + 2 + j < len(ids) else IGNORE
                assert int(batch.labels[r, start + j]) == want


def test_labels_shift_and_padding_is_ignored() -> None:
    _, vocab, samples = setup()
    batch = build_batch(random.Random(1), samples, vocab.to_draft, seq_len=24, n_parallel=4, anchors=2)
    ids = vocab.to_draft[torch.tensor(samples[1].tokens)]
    assert batch.labels[1, :12].tolist() == ids[1:].tolist()
    assert (batch.labels[1, 12:24] == IGNORE).all()
    # Out-of-vocabulary target tokens (>= 60 here) are UNK (0) in both inputs and labels.
    assert all(int(x) == 0 for t, x in zip(samples[1].tokens, ids, strict=True) if t >= 60)


def test_half_the_anchors_fall_in_the_fim_middle() -> None:
    s = Sample(list(range(100)), middle_start=80)
    anchors = pick_anchors(random.Random(0), s, 40)
    assert sum(a >= 79 for a in anchors) >= 20
    assert all(0 <= a <= 97 for a in anchors)  # every anchor keeps at least two tokens to predict
    assert pick_anchors(random.Random(0), Sample([1, 2], 0), 4) == []
