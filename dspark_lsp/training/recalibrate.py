"""Recalibrating a draft's confidence head on real decoding (``python -m dspark_lsp.training.recalibrate``).

A confidence head fitted on training shards was over-confident by 0.1-0.25 in the middle bins when the
real decode loop ran on held-out files (bench.mode_ablation's reliability): in decoding the head also sees
chain steps past those trained and text unlike the training shards. This replays the decode loop, with
the draft alone, on a *calibration* set of held-out prompts (made like the evaluation sets, with another
seed), collects each judged token's stated confidence and whether the target accepted it, fits Platt's
(a, b) to those pairs and folds them into the head. Evaluate on a different set afterwards.

``--per-slot`` (the default) fits one bias per (kind, step) slot the tokens were stated from
(training.slot_platt). ``--rounds N`` repeats replay-and-fit on the recalibrated draft: the confidences
decide where rounds stop, so recalibrating changes which tokens are judged, and the next round fits that.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.errors import UserError


def replay_pairs(draft: Any, items: list[dict[str, Any]], tokenizer: Any, features: list[Any],
                 cost: dict[int, float], modes: tuple[str, ...]) -> list[tuple[float, bool, int]]:
    """(confidence, accepted, slot) of every judged draft token, replaying each item in each mode."""
    from dspark_lsp.bench.mode_ablation import Variant, run

    variants = {m: Variant(draft, m) for m in modes}
    totals = run(items, tokenizer, None, cost, features=features, variants=variants)
    return [p for t in totals.values() for p in t.calibration]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.training.recalibrate", description=__doc__.split("\n")[0])
    ap.add_argument("--draft", required=True, help="feature draft directory with a confidence head")
    ap.add_argument("--out", required=True, type=Path, help="where to write the recalibrated draft")
    ap.add_argument("--set", required=True, help="calibration set (bench.acceptance --make-set --languages)")
    ap.add_argument("--target", required=True)
    ap.add_argument("--target-dtype", default="gguf")
    ap.add_argument("--features-cache", default="")
    ap.add_argument("--cost", required=True, help="JSON {n: ms} verify-cost curve")
    ap.add_argument("--modes", default="ar,semi")
    ap.add_argument("--per-slot", action=argparse.BooleanOptionalAction, default=True,
                    help="one bias per (kind, step) slot beside the shared scale (default: on)")
    ap.add_argument("--prior", type=float, default=10.0, help="pull of each slot's bias toward the global one, "
                                                              "in judged tokens")
    ap.add_argument("--rounds", type=int, default=1, help="replay-and-fit rounds on the recalibrated draft")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        return _recalibrate(a)
    except (UserError, OSError, KeyError, ValueError) as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)


def _recalibrate(a: argparse.Namespace) -> int:
    """Load the target and the set once, then each round: replay the draft, fit, fold, save to --out (the
    next round replays the draft it saved)."""
    from transformers import AutoTokenizer

    from dspark_lsp.bench.acceptance import target_features_for
    from dspark_lsp.drafts.io import load_feat_draft, save_feat_draft
    from dspark_lsp.drafts.registry import load_trained_draft
    from dspark_lsp.models.loader import resolve_model

    if a.rounds < 1:
        raise UserError("--rounds must be at least 1")
    data = json.loads(Path(a.set).read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(a.target)))
    target, feats = target_features_for(a.target, data, 1, a.features_cache, a.target_dtype)
    cost = {int(k): float(v) for k, v in json.loads(a.cost).items()}
    source = Path(a.draft)
    fits: list[dict[str, Any]] = []
    before: Any = None  # the draft's own earlier recalibration, kept in the record
    for r in range(a.rounds):
        draft = load_trained_draft(source, target, use_confidence=True)
        pairs = replay_pairs(draft, list(data["items"]), tokenizer, feats, cost, tuple(a.modes.split(",")))
        if len(pairs) < 50:
            raise UserError(f"only {len(pairs)} judged tokens: use a larger calibration set")
        p, labels, logits = _judged_logits(pairs)
        model, vocab, meta = load_feat_draft(source, torch.float32)
        if model.conf is None:
            raise UserError(f"{a.draft} has no confidence head")
        if r == 0:
            before = meta.get("recalibrated")
        fit = _fit_and_fold(model, pairs, p, labels, logits, a.per_slot, a.prior)
        fits.append({"round": r + 1, **fit})
        print(json.dumps(fits[-1]), flush=True)
        save_feat_draft(a.out, model, vocab, {**meta, "recalibrated": {
            "set": a.set, "per_slot": a.per_slot, "prior": a.prior, "fits": fits,
            **({"before": before} if before else {})}})
        source = a.out
    return 0


def _judged_logits(pairs: list[tuple[float, bool, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stated confidences (clamped off 0 and 1), whether each token was accepted, and the logits."""
    p = torch.tensor([c for c, _, _ in pairs]).clamp(1e-6, 1 - 1e-6)
    labels = torch.tensor([float(ok) for _, ok, _ in pairs])
    logits = torch.log(p) - torch.log1p(-p)
    return p, labels, logits


def _fit_and_fold(model: Any, pairs: list[tuple[float, bool, int]], p: torch.Tensor, labels: torch.Tensor,
                  logits: torch.Tensor, per_slot: bool, prior: float) -> dict[str, Any]:
    """Fit Platt's (a, b) (per slot, or one shared pair), fold it into the draft's head, and say what was fitted."""
    from dspark_lsp.training.block_train import fit_platt
    from dspark_lsp.training.slot_platt import SlotPlatt, fit_slot_platt, fold_slot_platt

    fit: dict[str, Any] = {"pairs": len(pairs), "accepted": round(float(labels.mean()), 4),
                           "mean_confidence": round(float(p.mean()), 4)}
    if per_slot:
        sp = fit_slot_platt(logits, labels, torch.tensor([s for _, _, s in pairs]), prior)
    else:
        sp = SlotPlatt(*fit_platt(logits, labels), bias={}, counts={})
    fold_slot_platt(model, sp)
    fit.update(a=round(sp.a, 4), b=round(sp.b, 4),
               slots={str(k): {"n": sp.counts[k], "bias": round(v, 4)} for k, v in sp.bias.items()})
    return fit


if __name__ == "__main__":
    raise SystemExit(main())
