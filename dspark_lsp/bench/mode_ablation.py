"""Semi-autoregressive vs all-AR vs all-parallel drafting, replayed offline on a held-out set.

The real benchmark runs one prompt per language, where run-to-run noise (1-3%) is as large as the
differences between the three drafting modes. Greedy decoding is deterministic, so with the target's
continuations known (the draft's held-out set, `bench.acceptance --make-set`) the real decode loop can
be replayed against a :class:`ReplayTarget` on many prompts: exact target-forward counts and forward
sizes, real draft forwards (timed), and syntax key positions from the real tree-sitter layer. Time is
estimated as verify cost (a measured per-size curve, the same the scheduler uses) + measured draft time.

    python -m dspark_lsp.bench.mode_ablation --set dspark_lsp/drafts/dspark-draft-qwc05/eval/heldout_target.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_lsp.bench.replay_target import ReplayTarget, estimated_ms
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.costs import plan_forwards
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.models.fim import FimTokens, detect_fim_tokens

MODES = ("semi", "ar", "parallel")
# Measured on the CI machine with packed fp32 weights (bench/results/2026-11-29-s2, calibration line).
DEFAULT_COST = {1: 89.2, 2: 101.9, 3: 88.4, 4: 84.7, 5: 83.5, 6: 83.2, 8: 99.7}


@dataclass
class ModeTotals:
    tokens: int = 0
    forwards: int = 0
    draft_forwards: int = 0
    draft_s: float = 0.0
    verify_ms: float = 0.0
    by_language: dict[str, list[float]] = field(default_factory=dict)  # lang -> [tokens, ms]
    calibration: list[tuple[float, bool, int]] = field(default_factory=list)  # (confidence, accepted, slot) per judged token

    def add(self, lang: str, tokens: int, forwards: int, draft_forwards: int, draft_s: float, ms: float) -> None:
        self.tokens += tokens
        self.forwards += forwards
        self.draft_forwards += draft_forwards
        self.draft_s += draft_s
        self.verify_ms += ms
        row = self.by_language.setdefault(lang, [0.0, 0.0])
        row[0] += tokens
        row[1] += ms + draft_s * 1000

    def as_dict(self) -> dict[str, Any]:
        total_ms = self.verify_ms + self.draft_s * 1000
        return {
            "tokens": self.tokens,
            "target_forwards": self.forwards,
            "tokens_per_forward": round(self.tokens / max(1, self.forwards), 3),
            "draft_forwards": self.draft_forwards,
            "draft_ms": round(self.draft_s * 1000, 1),
            "est_verify_ms": round(self.verify_ms, 1),
            "est_tokens_per_s": round(1000 * self.tokens / max(total_ms, 1e-9), 2),
            "reliability": reliability_bins(self.calibration),
            "by_slot": slot_summary(self.calibration),
            "by_language": {
                k: {"tokens": int(v[0]), "est_tokens_per_s": round(1000 * v[0] / max(v[1], 1e-9), 2)}
                for k, v in sorted(self.by_language.items())
            },
        }


def reliability_bins(pairs: Sequence[tuple[float, bool, int]], bins: int = 10) -> list[dict[str, float]]:
    """Per bin of stated confidence: how many drafted tokens, their mean confidence and the share the
    target accepted (each token judged with every earlier one of its round accepted)."""
    rows = []
    for k in range(bins):
        sel = [(c, a) for c, a, _ in pairs if min(int(c * bins), bins - 1) == k]
        if sel:
            rows.append({"bin": k, "count": len(sel), "confidence": round(sum(c for c, _ in sel) / len(sel), 4),
                         "accepted": round(sum(a for _, a in sel) / len(sel), 4)})
    return rows


def slot_summary(pairs: Sequence[tuple[float, bool, int]]) -> dict[str, dict[str, float]]:
    """Per calibration slot (Proposal.slots; -1: none stated it): judged tokens, mean confidence, share
    accepted. A head miscalibrated in one (kind, step) shows here when the bins average it away."""
    acc: dict[int, list[float]] = {}
    for c, a, s in pairs:
        row = acc.setdefault(s, [0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += c
        row[2] += a
    return {str(s): {"count": int(n), "confidence": round(c / n, 4), "accepted": round(a / n, 4)}
            for s, (n, c, a) in sorted(acc.items())}


def _split_fim(prompt: list[int], fim: FimTokens) -> tuple[list[int], list[int]] | None:
    """(prefix ids, suffix ids) of a FIM prompt (prefix marker, prefix, suffix marker, suffix, middle
    marker), or None if it is not one."""
    try:
        p, s, m = prompt.index(fim.prefix_id), prompt.index(fim.suffix_id), prompt.index(fim.middle_id)
    except ValueError:
        return None
    return (prompt[p + 1 : s], prompt[s + 1 : m]) if p < s < m else None


def _guess_language(text: str) -> str:
    """The held-out files are Python and JavaScript; tell them apart by their most telling tokens."""
    js = sum(text.count(w) for w in ("function ", "const ", "=> ", "};", "var ", "let "))
    py = sum(text.count(w) for w in ("def ", "self", "elif ", "):\n", "import "))
    return "javascript" if js > py else "python"


@dataclass
class Variant:
    """One drafting policy to replay: a draft source, a drafting mode, and a fixed k (None: the scheduler)."""

    draft: DraftSource
    mode: str
    fixed_k: int | None = None
    calibrated_stop: str = "cost"  # SchedulerConfig.calibrated_stop, for a draft with a confidence head


def run(items: list[dict[str, Any]], tokenizer: Any, draft: DraftSource | None, cost: dict[int, float],
        k_max: int = 5, eos: int | None = None, features: list[Any] | None = None,
        alternates: int = DecodeConfig.alternates, variants: dict[str, Variant] | None = None,
        ) -> dict[str, ModeTotals]:
    """Replay every item under each variant (default: ``draft`` in each of MODES)."""
    from dspark_lsp.syntax import SyntaxDocument

    if variants is None:
        if draft is None:
            raise ValueError("a draft or variants are needed")
        variants = {m: Variant(draft, m) for m in MODES}
    plan = plan_forwards(cost)
    vocab = int(len(tokenizer))
    fim = detect_fim_tokens(tokenizer)
    eos_id = eos if eos is not None else fim.eos_ids[0]
    totals = {name: ModeTotals() for name in variants}
    for n_item, item in enumerate(items):
        prompt, target = list(item["prompt"]), list(item["target"])
        parts = _split_fim(prompt, fim)
        if parts is None:
            continue
        prefix, suffix = (str(tokenizer.decode(ids, skip_special_tokens=False)) for ids in parts)
        lang = str(item.get("language") or _guess_language(prefix + suffix))
        doc = SyntaxDocument(prefix + suffix, lang)
        scope = doc.completion_scope(len(prefix))
        for name, v in variants.items():
            tracker = doc.generation(len(prefix), scope)

            def is_key(ids: list[int], tracker: Any = tracker) -> bool:
                return bool(tracker.is_key_next(tokenizer.decode(ids, skip_special_tokens=False)))

            replay = ReplayTarget(prompt + target, vocab, eos_id, features[n_item] if features else None)
            v.draft.reset()
            cfg = DecodeConfig(
                max_new_tokens=len(target),
                draft_mode=v.mode,  # type: ignore[arg-type]
                scheduler=SchedulerConfig(k_max=k_max, verify_cost_ms=plan.cost_ms, fixed_k=v.fixed_k,
                                          calibrated_stop=v.calibrated_stop),
                pad_to=plan.pad_to or None,
                alternates=alternates,
            )
            res = SpeculativeDecoder(replay, vocab_size=vocab).generate(
                prompt, config=cfg, draft=v.draft, eos_ids=[eos_id], is_key=is_key
            )
            if res.tokens != target[: len(res.tokens)]:
                raise RuntimeError("replayed output differs from the target's continuation")
            decode_sizes = replay.forward_sizes[1:]  # the first forward is the prefill, common to all modes
            totals[name].calibration.extend(res.stats.calibration)
            totals[name].add(lang, len(res.tokens), res.stats.target_forwards, res.stats.draft_forwards,
                             res.stats.t_draft, estimated_ms(decode_sizes, plan.cost_ms))
    return totals


def ablation_variants(where: Path, target: Any, wrap: Any) -> dict[str, Variant]:
    """The block drafter's ablation: each part of the draft in ``where`` switched on and off (same weights,
    one target)."""
    from dspark_lsp.drafts.registry import DraftSpec, build_draft

    # Every part is named in every variant: a draft's export says which parts it uses by default
    # (vocab.json "parts"), and an ablation must not inherit that (with the heads shipped off, the +conf
    # variants ran without the confidence head and "parallel" without the Markov head).
    def src(block: bool, markov: bool, conf: bool) -> DraftSource:
        use: dict[str, bool | None] = {"use_block": block, "use_markov": markov, "use_confidence": conf}
        return wrap(build_draft(DraftSpec("trained", str(where), use=use), target))

    return {
        "ar": Variant(src(False, False, False), "ar"),
        "ar+markov": Variant(src(False, True, False), "ar"),
        "ar+conf": Variant(src(False, False, True), "ar"),
        "ar+conf-tau": Variant(src(False, False, True), "ar", calibrated_stop="tau"),
        "parallel": Variant(src(True, True, False), "parallel"),
        "parallel-nomarkov": Variant(src(True, False, False), "parallel"),
        "semi": Variant(src(True, True, False), "semi"),
        "semi+conf": Variant(src(True, True, True), "semi"),
        "semi+conf-tau": Variant(src(True, True, True), "semi", calibrated_stop="tau"),
        "parallel+conf": Variant(src(True, True, True), "parallel"),
        "fixed_k4-ar": Variant(src(False, False, False), "ar", 4),
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.bench.mode_ablation", description=__doc__.split("\n")[0])
    ap.add_argument("--set", required=True, help="held-out set: JSON with items of {prompt, target} token ids")
    ap.add_argument("--draft", default="dspark-draft-qwc05")
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the prepared default target)")
    ap.add_argument("--cost", default=None, help="JSON {n: ms} verify-cost curve (default: CI machine, packed fp32)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--target", default=None,
                    help="real target dir: needed for a feature draft (its features and embeddings)")
    ap.add_argument("--features-cache", default="", help="keep the target's features of --set here")
    ap.add_argument("--hybrid-min-conf", type=float, default=0.55,
                    help="n-gram confidence that makes the lookup answer before the draft (0.55: any match)")
    ap.add_argument("--alternates", type=int, default=DecodeConfig.alternates,
                    help="runner-up tokens verified beside the chain per round (0 = chain only)")
    ap.add_argument("--second-opinion", action="store_true",
                    help="when the lookup answers, offer the model's first-position choices as alternates")
    ap.add_argument("--target-dtype", default="float32", help="the real target's dtype (gguf: the 4-bit target)")
    ap.add_argument("--variants", action="store_true",
                    help="a block drafter's ablation (docs/ALGORITHM.md): AR, block with and without its Markov head, "
                         "syntax-cut (semi), the confidence head on and off, and a fixed k")
    ap.add_argument("--no-lookup", action="store_true", help="the draft alone, without n-gram lookup in front")
    return ap


@dataclass
class AblationInputs:
    """What one ablation replays: the held-out set, its tokenizer, the verify-cost curve, and either one
    draft (the three modes) or the named variants of a block drafter (``--variants``)."""

    data: dict[str, Any]
    tokenizer: Any
    cost: dict[int, float]
    draft: DraftSource | None
    variants: dict[str, Variant] | None
    features: list[Any] | None


def load_inputs(args: argparse.Namespace) -> AblationInputs:
    try:
        from transformers import AutoTokenizer

        from dspark_lsp.bench.acceptance import replay_draft
        from dspark_lsp.drafts.registry import LookupSpec, with_lookup
        from dspark_lsp.models.loader import resolve_model
        from dspark_lsp.models.registry import DEFAULT_TARGET

        data = json.loads(Path(args.set).read_text())
        tok_dir = args.tokenizer or str(resolve_model(DEFAULT_TARGET))
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        cost = {int(k): float(v) for k, v in json.loads(args.cost).items()} if args.cost else DEFAULT_COST
        def wrap(s: DraftSource) -> DraftSource:
            if args.no_lookup:
                return s
            return with_lookup(s, LookupSpec(min_confidence=args.hybrid_min_conf, second_opinion=args.second_opinion))

        variants = None
        if args.variants:
            from dspark_lsp.bench.acceptance import target_features_for
            from dspark_lsp.drafts.io import trained_draft_dir

            where = trained_draft_dir(args.draft)
            if where is None or not args.target:
                raise UserError("--variants needs a feature draft (--draft) and its target (--target)")
            features: list[Any] | None
            target, features = target_features_for(args.target, data, 1, args.features_cache, args.target_dtype)
            variants = ablation_variants(where, target, wrap)
            draft = None
        else:
            src, features = replay_draft(args.draft, data, args.target, 1, args.features_cache, args.target_dtype)
            draft = wrap(src)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"mode ablation: {exc}") from exc
    return AblationInputs(data, tokenizer, cost, draft, variants, features)


def print_report(totals: dict[str, ModeTotals], json_path: str | None) -> None:
    report = {m: t.as_dict() for m, t in totals.items()}
    for m, r in report.items():
        langs = ", ".join(f"{k} {v['est_tokens_per_s']}" for k, v in r["by_language"].items())
        print(f"{m:9s} tokens/forward {r['tokens_per_forward']:.3f}  draft forwards {r['draft_forwards']:4d}  "
              f"est. decode tok/s {r['est_tokens_per_s']:.2f}  ({langs})")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    inp = load_inputs(args)
    totals = run(list(inp.data["items"]), inp.tokenizer, inp.draft, inp.cost, features=inp.features,
                 alternates=args.alternates, variants=inp.variants)
    print_report(totals, args.json)
    return 0

if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
