"""The bench's results: what each method measured (`MethodResult`), its report entry and its table row.

A method's row is one of three kinds: measured, ``skipped`` (it cannot run here: a missing extra, no
assistant model) or ``failed`` (it raised while running: the one-line reason, the run went on without it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dspark_lsp.bench.fidelity import fidelity


@dataclass
class MethodResult:
    name: str
    skipped: str | None = None
    failed: str | None = None  # why it stopped (one line); its remaining prompts were not run
    tokens: int = 0
    seconds: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    t_draft: float = 0.0
    alt_proposed: int = 0
    alt_accepted: int = 0
    t_verify: float = 0.0
    t_prefill: float = 0.0
    outputs: list[list[int]] = field(default_factory=list)
    per_prompt_seconds: list[float] = field(default_factory=list)
    passed: int = 0
    pass_total: int = 0
    counts_forwards: bool = True
    prefill_split: bool = True  # t_prefill measured (HF's generate does not split its prefill out)
    engine: str = "dspark"  # "dspark" (our loop), "hf" or "llamacpp"
    drafted: int = 0  # llamacpp_lookup: draft tokens sent to its verify forwards
    by_language: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        """Ran on every prompt: neither skipped nor stopped by a failure."""
        return not self.skipped and not self.failed

    def add_language(self, lang: str, tokens: int, seconds: float, forwards: int) -> None:
        d = self.by_language.setdefault(lang, {"tokens": 0, "seconds": 0.0, "target_forwards": 0})
        d["tokens"] += tokens
        d["seconds"] += seconds
        d["target_forwards"] += forwards

    def add_output(self, out: list[int], seconds: float, forwards: int, lang: str) -> None:
        """One prompt's decode: its tokens, wall time and target forwards."""
        self.tokens += len(out)
        self.seconds += seconds
        self.target_forwards += forwards
        self.outputs.append(out)
        self.per_prompt_seconds.append(seconds)
        self.add_language(lang, len(out), seconds, forwards)


def decode_tps(r: MethodResult) -> float | None:
    """Tokens per second of the decode alone (after the prefill), for every method that times its prefill
    (our loops, llama.cpp's; not HF's generate). All tokens over the time after the prefill, as before."""
    if not r.prefill_split or r.seconds <= r.t_prefill:
        return None
    return r.tokens / (r.seconds - r.t_prefill)


def method_entries(results: dict[str, MethodResult], prompt_tokens: int) -> dict[str, dict[str, Any]]:
    """Every method's entry, against target_only (none where it failed: then nothing has a baseline) and
    target_fp32 (where it ran)."""
    base = results["target_only"]
    ref = results.get("target_fp32")
    reference = ref if ref is not None and ref.ran else None
    return {name: method_entry(r, base if base.ran else None, reference, prompt_tokens)
            for name, r in results.items()}


def method_entry(r: MethodResult, base: MethodResult | None, reference: MethodResult | None,
                 prompt_tokens: int) -> dict[str, Any]:
    """One method's report: speed against ``base`` (target_only), prefill and decode apart, sameness to
    ``base`` and fidelity to ``reference`` (target_fp32); a comparison is None where its side did not run."""
    if r.skipped:
        return {"skipped": r.skipped}
    if r.failed:
        return {"failed": r.failed, "prompts_run": len(r.outputs)}
    tps = r.tokens / r.seconds if r.seconds else 0.0
    dt = decode_tps(r)
    ours = r.engine == "dspark"
    return {
        "engine": r.engine,
        "tokens_per_s": round(tps, 3),
        **_against_base(r, base, tps, dt),
        "prefill_s": round(r.t_prefill, 3) if r.prefill_split else None,
        "prefill_tokens_per_s": round(prompt_tokens / r.t_prefill, 1) if r.prefill_split and r.t_prefill else None,
        "decode_tokens_per_s": None if dt is None else round(dt, 3),
        "mean_accepted": round(r.tokens / r.target_forwards, 3) if r.counts_forwards and r.target_forwards else None,
        "vs_fp32": fidelity(r.outputs, reference.outputs) if reference is not None else None,
        "tokens": r.tokens,
        "seconds": round(r.seconds, 3),
        "target_forwards": r.target_forwards if r.counts_forwards else None,
        "draft_forwards": r.draft_forwards if ours else None,
        "drafted_tokens": r.drafted if r.engine == "llamacpp" else None,
        "alternates": {"proposed": r.alt_proposed, "accepted": r.alt_accepted} if ours else None,
        "time_split_s": {
            "prefill": round(r.t_prefill, 3),
            "draft": round(r.t_draft, 3),
            # llama.cpp's decode time is not split into its forwards and the rest
            "verify": round(r.t_verify, 3) if ours else None,
        }
        if r.prefill_split
        else None,
        "pass_at_1": round(r.passed / r.pass_total, 4) if r.pass_total else None,
        "by_language": _by_language(r),
    }


def _against_base(r: MethodResult, base: MethodResult | None, tps: float, dt: float | None) -> dict[str, Any]:
    """Speedups over target_only and sameness to its outputs (None each when target_only did not run)."""
    if base is None:
        return {"speedup": None, "decode_speedup": None, "identical": None, "identical_prompts": None}
    base_tps = base.tokens / base.seconds if base.seconds else 0.0
    base_dec = decode_tps(base)
    return {
        "speedup": round(tps / base_tps, 3) if base_tps else None,
        "decode_speedup": round(dt / base_dec, 3) if dt is not None and base_dec else None,
        "identical": all(a == b for a, b in zip(r.outputs, base.outputs, strict=True)),
        "identical_prompts": sum(a == b for a, b in zip(r.outputs, base.outputs, strict=True)),
    }


def _by_language(r: MethodResult) -> dict[str, dict[str, float | None]]:
    return {
        lang: {
            "tokens_per_s": round(d["tokens"] / d["seconds"], 3) if d["seconds"] else 0.0,
            "mean_accepted": round(d["tokens"] / d["target_forwards"], 3)
            if r.counts_forwards and d["target_forwards"]
            else None,
        }
        for lang, d in r.by_language.items()
    }


TABLE_HEADER = (
    f"{'method':24} {'tok/s':>8} {'speedup':>8} {'prefill s':>9} {'dec tok/s':>9} {'decode x':>8} {'acc/fwd':>8} "
    f"{'identical':>10} {'=fp32':>6} {'div mean/min':>12} {'pass@1':>7} {'draft s':>8} {'verify s':>9}"
)


def table_row(name: str, r: dict[str, Any]) -> str:
    """One method's line of the table: "n/a" where a method cannot measure a figure (HF's generate has
    no prefill split), "-" where it has none (no fp32 reference ran, no forward count, no test)."""
    if "skipped" in r:
        return f"{name:24} skipped: {r['skipped']}"
    if "failed" in r:
        return f"{name:24} failed: {r['failed']}"

    def num(v: float | None, fmt: str, missing: str = "-") -> str:
        return missing if v is None else format(v, fmt)

    split = r.get("time_split_s") or {}
    na = "n/a" if r.get("prefill_s") is None else "-"
    fid = r.get("vs_fp32")
    same = "-" if fid is None or fid["identical_share"] is None else f"{fid['identical_share']:.2f}"
    div = "-" if fid is None or fid["mean_first_divergence"] is None else (
        f"{fid['mean_first_divergence']:.1f}/{fid['min_first_divergence']}")
    identical = "-" if r["identical"] is None else str(r["identical"])
    return (
        f"{name:24} {r['tokens_per_s']:8.2f} {num(r['speedup'], '.2f'):>8} {num(r.get('prefill_s'), '.2f', na):>9} "
        f"{num(r.get('decode_tokens_per_s'), '.2f', na):>9} {num(r.get('decode_speedup'), '.2f', na):>8} "
        f"{num(r['mean_accepted'], '.2f'):>8} {identical:>10} {same:>6} {div:>12} "
        f"{num(r['pass_at_1'], '.2f'):>7} {num(split.get('draft'), '.2f'):>8} {num(split.get('verify'), '.2f'):>9}"
    )


def print_table(report: dict[str, Any]) -> None:
    m = report["model"]
    print(f"target={m['target']} draft={m['draft']} assistant={m['assistant']} prompts={len(report['prompts'])} "
          f"weights={report['settings']['dtype']}")
    print(TABLE_HEADER)
    print("-" * len(TABLE_HEADER))
    for name, r in report["methods"].items():
        print(table_row(name, r))
    print("prefill s: all prompts' prefill; dec tok/s: tokens over the time after it; =fp32: share of prompts "
          "identical to target_fp32; div mean/min: first differing token vs target_fp32 (identical = full length)")
    fc = report.get("forward_cost_ms")
    if fc:
        sizes = "/".join(fc["target"])
        line = f"one forward of {sizes} tokens on {fc['context']}: ours " + " / ".join(
            f"{v:.1f}" for v in fc["target"].values()) + " ms"
        if "llamacpp" in fc:
            line += "; llama.cpp " + " / ".join(f"{v:.1f}" for v in fc["llamacpp"].values()) + " ms"
        print(line)
    if "syntax_step_cost" in report:
        print("syntax classification cost per decode step (2,000-line file):")
        for lang, d in report["syntax_step_cost"].items():
            print(f"  {lang:12} {d}")
