"""Saving and loading a feature draft: ``model.safetensors`` + ``feat_config.json`` + ``vocab.json``.

The directory format is told apart from the token draft's by its config file name. Exports are atomic and
damaged files are refused with a ModelError, as for the token draft (draftnet.io.atomic_export)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from dspark_lsp.draftnet.io import atomic_export, load_weights, read_json
from dspark_lsp.draftnet.vocab import DraftVocab
from dspark_lsp.errors import ModelError
from dspark_lsp.featdraft.config import FeatDraftConfig
from dspark_lsp.featdraft.model import FeatDraft

WEIGHTS, CONFIG, VOCAB = "model.safetensors", "feat_config.json", "vocab.json"


def is_feat_draft_dir(path: Path) -> bool:
    return (path / CONFIG).is_file()


def save_feat_draft(out: Path, model: FeatDraft, vocab: DraftVocab, meta: dict[str, object],
                    dtype: torch.dtype = torch.float16) -> None:
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    with atomic_export(out) as tmp:
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
        (tmp / CONFIG).write_text(model.cfg.to_json())
        (tmp / VOCAB).write_text(json.dumps({"target_ids": vocab.target_ids.tolist(),
                                             "target_vocab_size": vocab.target_vocab_size, **meta}))


def _split_vocab(data: object) -> tuple[DraftVocab, dict[str, object]]:
    """vocab.json holds the id map and the export's metadata (step, unroll ...) side by side."""
    meta = dict(data)  # type: ignore[call-overload]  # not an object: TypeError/ValueError -> ModelError
    return DraftVocab(meta.pop("target_ids"), int(meta.pop("target_vocab_size"))), meta


def load_feat_draft(d: Path, dtype: torch.dtype = torch.float32) -> tuple[FeatDraft, DraftVocab, dict[str, object]]:
    for name in (WEIGHTS, CONFIG, VOCAB):
        if not (d / name).is_file():
            raise ModelError(f"feature draft directory {d} lacks {name}")
    cfg = read_json(d / CONFIG, "feature draft config", lambda _: FeatDraftConfig.load(d / CONFIG))
    vocab, meta = read_json(d / VOCAB, "feature draft vocab", _split_vocab)
    if vocab.size != cfg.vocab_size:
        raise ModelError(f"feature draft {d}: vocab.json has {vocab.size} ids, the config says {cfg.vocab_size}")
    model = FeatDraft(cfg)
    weights = load_weights(d / WEIGHTS, "feature draft")
    try:
        model.load_state_dict({k: t.to(dtype) for k, t in weights.items()})
    except RuntimeError as exc:
        raise ModelError(f"feature draft weights in {d} do not fit its config: {exc}") from exc
    return model.to(dtype).eval(), vocab, meta
