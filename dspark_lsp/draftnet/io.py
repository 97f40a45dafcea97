"""Saving and loading a trained draft: ``model.safetensors`` + ``draft_config.json`` + ``vocab.json``.

Shipped drafts live in the package (``dspark_lsp/drafts/<name>/``) so loading needs no network.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dspark_lsp.draftnet.config import DraftNetConfig
from dspark_lsp.draftnet.model import DraftNet
from dspark_lsp.draftnet.vocab import DraftVocab
from dspark_lsp.errors import ModelError, UserError

WEIGHTS, CONFIG, VOCAB = "model.safetensors", "draft_config.json", "vocab.json"
DEFAULT_DRAFT = "dspark-draft-qwc05"


def save_draft(
    out: Path, model: DraftNet, vocab: DraftVocab, meta: dict[str, object], dtype: torch.dtype = torch.float16
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # Tied embeddings: store the shared matrix once (safetensors refuses aliased tensors anyway).
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / CONFIG).write_text(model.cfg.to_json())
    (out / VOCAB).write_text(json.dumps({"target_ids": vocab.target_ids.tolist(),
                                         "target_vocab_size": vocab.target_vocab_size, **meta}))


def shipped_drafts() -> list[str]:
    root = resources.files("dspark_lsp") / "drafts"
    if not root.is_dir():  # an install without shipped drafts
        return []
    from dspark_lsp.featdraft.io import CONFIG as FEAT_CONFIG  # a feature draft ships in the same folder

    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and ((p / CONFIG).is_file() or (p / FEAT_CONFIG).is_file()))


def resolve_draft_dir(path_or_name: str | Path) -> Path:
    p = Path(path_or_name).expanduser()
    if p.is_dir():
        return p
    shipped = resources.files("dspark_lsp") / "drafts" / str(path_or_name)
    if shipped.is_dir():
        return Path(str(shipped))
    raise UserError(
        f"no draft model {str(path_or_name)!r}: not a directory, and the shipped drafts are "
        f"{', '.join(shipped_drafts()) or 'none'}"
    )


def load_draft_net(path_or_name: str | Path, dtype: torch.dtype = torch.float32) -> tuple[DraftNet, DraftVocab]:
    d = resolve_draft_dir(path_or_name)
    for name in (WEIGHTS, CONFIG, VOCAB):
        if not (d / name).is_file():
            raise ModelError(f"draft directory {d} lacks {name}")
    cfg = DraftNetConfig.load(d / CONFIG)
    v = json.loads((d / VOCAB).read_text())
    vocab = DraftVocab(v["target_ids"], int(v["target_vocab_size"]))
    if vocab.size != cfg.vocab_size:
        raise ModelError(f"draft {d}: vocab.json has {vocab.size} ids, the config says {cfg.vocab_size}")
    model = DraftNet(cfg)
    try:
        model.load_state_dict({k: t.to(dtype) for k, t in load_file(str(d / WEIGHTS)).items()})
    except RuntimeError as exc:
        raise ModelError(f"draft weights in {d} do not fit its config: {exc}") from exc
    model.to(dtype).eval()
    return model, vocab
