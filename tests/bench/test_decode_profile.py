"""bench.decode_profile on a tiny random model: one row per generated token, parts within each row's wall."""

from __future__ import annotations

from typing import Any

from dspark_lsp.bench.decode_profile import DecodeProbe, profile_decode, run_loop
from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder

PROMPT = [5 + (i * 37) % 300 for i in range(40)]
SLACK_MS = 0.05  # rounding of the profiler's microsecond times


def _check_rows(rows: list[Any], n_tokens: int) -> None:
    assert [r.index for r in rows] == list(range(len(rows)))
    assert sum(r.tokens for r in rows) == n_tokens
    for r in rows:
        assert r.wall_ms > 0 and r.forward_ms > 0
        assert r.forward_ms + r.outside_ms <= r.wall_ms + 1e-6
        ops = r.products_ms + r.attention_ms + r.kv_ms + r.other_ops_ms
        assert ops + r.forward_python_ms <= r.forward_ms + SLACK_MS


def test_target_only_rows_one_per_token_and_add_up(tiny_target: Any) -> None:
    decoder = SpeculativeDecoder(tiny_target)
    config = DecodeConfig(max_new_tokens=6)
    run = run_loop(decoder, PROMPT, config)
    assert len(run.tokens) == 6
    assert len(run.rows) == 6  # row 0: the prefill's token; then one round per token
    assert all(r.tokens == 1 for r in run.rows)
    _check_rows(run.rows, 6)
    assert run.rows[0].forward_ms > 0 and run.after_prefill["kv"]["length"] == len(PROMPT)
    assert run.after_prefill["torch_threads"] >= 1
    # The seams are the decoder's own again afterwards (and the embedding's forward its class's).
    assert not any(name in vars(decoder) for name in ("_forward", "_round", "_prefill", "_emit"))
    assert "forward" not in vars(tiny_target.get_input_embeddings())
    assert all(r.embed_ms > 0 for r in run.rows)


def test_profiled_rows_split_the_forward(tiny_target: Any) -> None:
    decoder = SpeculativeDecoder(tiny_target)
    run = run_loop(decoder, PROMPT, DecodeConfig(max_new_tokens=4), profiled=True)
    assert len(run.rows) == 4
    _check_rows(run.rows, 4)
    # A plain fp32 model: its products are aten::linear/addmm and show up in the products bucket.
    assert all(r.products_ms > 0 for r in run.rows)


def test_probe_leaves_the_output_unchanged(tiny_target: Any) -> None:
    decoder = SpeculativeDecoder(tiny_target)
    config = DecodeConfig(max_new_tokens=8)
    plain = decoder.generate(PROMPT, config=config).tokens
    with DecodeProbe(decoder).installed():
        probed = decoder.generate(PROMPT, config=config).tokens
    assert probed == plain


def test_report_compares_loop_and_isolated_forward(tiny_target: Any) -> None:
    decoder = SpeculativeDecoder(tiny_target)
    report = profile_decode(decoder, PROMPT, DecodeConfig(max_new_tokens=5), repeats=2, forward_repeats=2)
    assert report["new_tokens"] == 5
    assert len(report["rows"]) == 2 and all(len(rows) == 5 for rows in report["rows"])
    assert report["isolated_forward_ms"] > 0 and report["loop_forward_over_isolated"] > 0
    # An isolated forward was timed before every round (not before the prefill row), outside the row's wall.
    for rows in report["rows"]:
        assert rows[0]["paired_ms"] == 0 and all(r["paired_ms"] > 0 for r in rows[1:])
        assert all(r["forward_ms"] + r["outside_ms"] <= r["wall_ms"] + 1e-3 for r in rows)
    assert report["paired_forward_ratio"] > 0
    assert report["first_prefill"]["rss_after_mb"] > 0 and report["after_prefill"]["kv"]["capacity"] >= len(PROMPT)
    loop = report["loop_per_token_ms"]
    assert loop["forward_ms"] <= loop["wall_ms"]
    assert report["context_for_isolated"] == len(PROMPT) + 2


def test_a_single_token_is_the_prefill_row(tiny_target: Any) -> None:
    run = run_loop(SpeculativeDecoder(tiny_target), PROMPT, DecodeConfig(max_new_tokens=1))
    assert len(run.rows) == 1 and run.rows[0].tokens == 1
