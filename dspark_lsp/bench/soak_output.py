"""The soak's outputs: the text table, soak.png (with matplotlib, the `soak` extra) and the files written."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from dspark_lsp.bench.soak_records import SoakReport


def text_table(report: SoakReport) -> str:
    r = report
    lines = [
        f"soak: {r.duration_s / 60:.1f} min, {r.files} files ({', '.join(r.languages)}), "
        f"{r.typed_chars} chars typed; opens {r.opens} (reopens {r.reopens}), closes {r.closes}",
        f"requests {r.requests}, answers {r.answers}, suggestions {r.suggestions}, empty {r.empty}, "
        f"cancels sent {r.cancels_sent}, cancelled answers {r.cancelled_answers}, errors {r.errors}, "
        f"unanswered {r.unanswered}",
        f"latency (answered before the next key): p50 {_fmt(r.p50_ms)} ms, p95 {_fmt(r.p95_ms)} ms",
        f"RSS: start {_fmt(r.rss_start_mb)} MB, after warm-up ({r.warmup_s:.0f} s) {_fmt(r.rss_after_warmup_mb)} MB, "
        f"end {_fmt(r.rss_end_mb)} MB, peak {_fmt(r.rss_peak_mb)} MB; slope after warm-up "
        f"{_fmt(r.rss_slope_mb_per_10min)} MB/10 min -> "
        + ("flat" if r.flat else "GROWING" if r.flat is False else "too few samples"),
        f"server stayed up: {'yes' if r.server_alive_at_end else 'NO'}, exit code {r.exit_code}; "
        f"open-document mismatches: {len(r.document_mismatches)}",
        "",
        f"{'window':>8} {'reqs':>6} {'timely':>6} {'sugg':>6} {'cancel':>6} {'err':>4} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'RSS MB':>8}",
    ]
    for w in r.windows:
        lines.append(
            f"{w['start_s']:>7.0f}s {w['requests']:>6} {w['answered_in_time']:>6} {w['suggestions']:>6} "
            f"{w['cancels']:>6} {w['errors']:>4} {_fmt(w['p50_ms']):>8} {_fmt(w['p95_ms']):>8} "
            f"{_fmt(w['rss_mb']):>8}"
        )
    if r.plot:
        lines += ["", f"plot: {r.plot}"]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def write_plot(report: SoakReport, path: Path) -> str:
    """soak.png: RSS over time, and p50/p95 per window; skipped (and said so) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a bench machine
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib is not installed (pip install 'dspark-lsp[soak]')"
    fig, (ax_rss, ax_lat) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    if report.rss_samples:
        ax_rss.plot([t / 60 for t, _ in report.rss_samples], [v for _, v in report.rss_samples], lw=1.2)
    ax_rss.axvline(report.warmup_s / 60, color="grey", ls="--", lw=0.8, label="end of warm-up")
    slope = report.rss_slope_mb_per_10min
    ax_rss.set_title(f"server RSS (slope after warm-up {_fmt(slope)} MB / 10 min)")
    ax_rss.set_ylabel("VmRSS (MB)")
    ax_rss.legend(loc="lower right")
    mids = [(w["start_s"] + report.window_s / 2) / 60 for w in report.windows]
    drawn = 0
    for key, label in (("p50_ms", "p50"), ("p95_ms", "p95")):
        pts = [(m, w[key]) for m, w in zip(mids, report.windows, strict=True) if w[key] is not None]
        if pts:
            ax_lat.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label)
            drawn += 1
    ax_lat.set_title("completion latency per window (answered before the next key)")
    ax_lat.set_ylabel("ms")
    ax_lat.set_xlabel("minutes")
    if drawn:
        ax_lat.legend(loc="upper right")
    else:  # every request was cancelled or failed: say so on the plot rather than draw an empty axis
        ax_lat.text(0.5, 0.5, "no request answered before the next key", ha="center", transform=ax_lat.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def write_outputs(report: SoakReport, out_dir: Path) -> dict[str, Path]:
    """soak.json, soak.txt and soak.png (when matplotlib is importable) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report.plot = write_plot(report, out_dir / "soak.png")
    paths = {"json": out_dir / "soak.json", "text": out_dir / "soak.txt"}
    paths["json"].write_text(json.dumps(asdict(report), indent=2) + "\n")
    paths["text"].write_text(text_table(report))
    if not report.plot.startswith("skipped"):
        paths["png"] = Path(report.plot)
    return paths
