"""Corpus preparation: read the files, split train/held-out, count target tokens, choose the reduced
vocabulary. The result is saved in the run directory so that a resumed run reuses the same vocabulary."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.errors import UserError
from dspark_lsp.training.corpus import CorpusFile, SourceRoot, collect, is_held_out, read_text
from dspark_lsp.training.samples import special_ids


@dataclass
class Corpus:
    train: list[str]
    held_out: list[str]
    held_out_keys: list[str]
    vocab: DraftVocab
    stats: dict[str, object]

    def pick_train(self, rng: random.Random) -> str:
        # Files weighted by length, so every character is about equally likely to be sampled.
        if not hasattr(self, "_weights"):
            self._weights = [len(t) for t in self.train]
        return rng.choices(self.train, weights=self._weights)[0]


def _read(files: list[CorpusFile]) -> list[tuple[CorpusFile, str]]:
    out = []
    for f in files:
        text = read_text(f.path)
        if text and text.strip():
            out.append((f, text))
    return out


def prepare_corpus(
    roots: list[SourceRoot],
    tok: Tokenizer,
    keep_tokens: int,
    held_out_percent: float,
    cache_file: Path | None,
    max_files: int | None = None,
    target_vocab_size: int = 0,
) -> Corpus:
    files = collect(roots)
    if max_files is not None:
        files = files[:max_files]
    if not files:
        raise UserError("the corpus is empty: no source files under " + ", ".join(str(r.path) for r in roots))
    pairs = _read(files)
    train = [(f, t) for f, t in pairs if not is_held_out(f.key, held_out_percent)]
    held = [(f, t) for f, t in pairs if is_held_out(f.key, held_out_percent)]
    if not train:
        raise UserError("every corpus file fell into the held-out split; add files or lower the split")
    vocab_size = max(tok.get_vocab_size(with_added_tokens=True), target_vocab_size)
    if cache_file is not None and cache_file.is_file():
        saved = json.loads(cache_file.read_text())
        vocab = DraftVocab(saved["target_ids"], saved["target_vocab_size"])
        stats = saved["stats"]
    else:
        target_vocab = max(vocab_size, 1)
        counts = np.zeros(target_vocab, dtype=np.int64)
        per_root: dict[str, dict[str, object]] = {}
        for split, group in (("train", train), ("held_out", held)):
            encs = tok.encode_batch([t for _, t in group], add_special_tokens=False) if group else []
            for (f, _), enc in zip(group, encs, strict=True):
                r = per_root.setdefault(f.root, {"licence": f.licence, "files": 0, "train_tokens": 0,
                                                 "held_out_tokens": 0})
                r["files"] = int(r["files"]) + 1  # type: ignore[call-overload]
                key = f"{split}_tokens"
                r[key] = int(r[key]) + len(enc.ids)  # type: ignore[call-overload]
                if split == "train":
                    counts += np.bincount(np.asarray(enc.ids, dtype=np.int64), minlength=target_vocab)
        specials = list(special_ids(tok).values())
        counts[specials] = 0
        order = [int(i) for i in np.argsort(-counts, kind="stable")[:keep_tokens] if counts[i] > 0]
        kept = specials + order
        total = int(counts.sum())
        stats = {
            "per_root": per_root,
            "train_files": len(train),
            "held_out_files": len(held),
            "train_tokens": total,
            "kept_tokens": len(kept),
            "train_coverage": float(counts[order].sum() / max(total, 1)),
        }
        vocab = DraftVocab(kept, target_vocab)
        if cache_file is not None:
            cache_file.write_text(json.dumps({"target_ids": kept, "target_vocab_size": target_vocab,
                                              "stats": stats}))
    return Corpus([t for _, t in train], [t for _, t in held], [f.key for f, _ in held], vocab, stats)
