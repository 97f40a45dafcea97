"""The typing replay bench, run against the server with the fake service (fast, time-scaled)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.bench import lsp_replay
from dspark_lsp.bench.lsp_replay import ReplayConfig, run_replay, typing_plan
from dspark_lsp.errors import UserError

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
SOURCE = (
    "def greet(name):\n"
    "    s = '😀 hello'\n"
    "    return s + name\n"
    "\n"
    "for word in ['漢字', 'abc']:\n"
    "    print(greet(word))\n"
)


def config(tmp_path: Path, **overrides: object) -> ReplayConfig:
    path = tmp_path / "sample.py"
    path.write_text(SOURCE, encoding="utf-8")
    fields: dict[str, object] = {
        "server_command": [sys.executable, str(FIXTURES / "fake_server.py"), "warning"],
        "start_fraction": 0.2,
        "max_chars": 120,
        "word_pause_prob": 0.5,
        "time_scale": 0.02,
        "load_timeout_s": 20,
    }
    fields.update(overrides)
    return ReplayConfig(file=path, **fields)  # type: ignore[arg-type]


def service_records(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The list the replay's per-request service records (what the server's stats hold) are added to."""
    seen: list[dict[str, object]] = []
    original = lsp_replay._report

    def capture(label: str, stats: dict, typed: int, wall: float):  # type: ignore[no-untyped-def]
        seen.extend(stats["service"])
        return original(label, stats, typed, wall)

    monkeypatch.setattr(lsp_replay, "_report", capture)
    return seen


@pytest.mark.timeout(60)
def test_replay_types_the_file_and_reports(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pauses = sum(1 for _, _, pause in typing_plan(SOURCE, cfg) if pause)
    report = run_replay(cfg)
    assert report.requests == pauses > 3
    assert report.completed + report.cancelled + report.not_ready + report.errors == report.requests
    assert report.completed >= 1 and report.p50_ms is not None and report.p95_ms is not None
    assert report.p50_ms <= report.p95_ms
    assert 0.0 <= report.cancelled_share <= 1.0
    assert report.peak_rss_mb is not None and report.peak_rss_mb > 10
    assert report.open_documents == 1


@pytest.mark.timeout(60)
def test_replay_churns_extra_documents_and_releases_them(tmp_path: Path) -> None:
    report = run_replay(config(tmp_path, extra_documents=5, max_chars=20))
    assert report.open_documents == 1  # the five extra files were closed on the server
    assert report.requests >= 5 + 1  # one completion per extra file, plus the replay's own


@pytest.mark.timeout(60)
def test_replay_keeps_the_servers_document_in_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every completion the service saw had the cursor at the end of exactly the text typed so far
    (incremental edits with emoji/CJK columns applied right)."""
    seen = service_records(monkeypatch)
    run_replay(config(tmp_path))
    assert seen
    for record in seen:
        offset = int(record["offset"])  # type: ignore[call-overload]
        assert record["text_len"] == offset
        assert record["tail"] == SOURCE[offset - 2 : offset]


def test_replay_reports_a_missing_file_as_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        run_replay(ReplayConfig(file=tmp_path / "nope.py"))


def test_report_reads_each_requests_figures_through_the_contract() -> None:
    """The per-request service figures are read as CompletionStats: a record with a figure of the wrong
    type (a string count) has no figures, and one that is not an object none at all, instead of failing
    the replay or entering the means."""
    ok = {"status": "ok", "latencyMs": 100.0,
          "service": {"prefill_tokens": 40, "reused_tokens": 200, "target_forwards": 9, "latency_ms": 90.0,
                      "accepted_per_forward": 1.5, "from_cache": False, "scope": "line"}}
    cached = {"status": "ok", "latencyMs": 2.0, "service": {"latency_ms": 1.0, "from_cache": True}}
    bad = {"status": "ok", "latencyMs": 50.0, "service": {"prefill_tokens": "many", "from_cache": True}}
    odd = {"status": "empty", "latencyMs": 10.0, "service": ["not", "an", "object"]}
    stats = {"counters": {"requests": 4}, "requests": [ok, cached, bad, odd], "documents": 1}
    rep = lsp_replay._report("t", stats, typed=10, wall=1.0)
    assert rep.completed == 4
    assert rep.service["prefill_tokens"] == 40.0 and rep.service["target_forwards"] == 9.0
    assert rep.service["latency_ms"] == 45.5  # 90 and 1: the malformed record has none
    assert rep.service["from_cache"] == 2  # a flag is read as a flag even beside a malformed figure


def test_report_keeps_one_row_per_request_in_order() -> None:
    """A tail request is one of a handful: the report keeps each answered request's latency with the
    prompt it had to prefill, so the slow one can be told apart from the rest."""
    fast = {"status": "ok", "latencyMs": 300.0,
            "service": {"prompt_tokens": 900, "prefill_tokens": 20, "reused_tokens": 880, "t_prefill_ms": 60.5}}
    slow = {"status": "ok", "latencyMs": 3100.0,
            "service": {"prompt_tokens": 910, "prefill_tokens": 850, "reused_tokens": 60}}
    dropped = {"status": "superseded", "latencyMs": 5.0, "service": {}}
    stats = {"counters": {"requests": 3}, "requests": [fast, dropped, slow], "documents": 1}
    rows = lsp_replay._report("t", stats, typed=10, wall=1.0).per_request
    assert [r["latency_ms"] for r in rows] == [300.0, 3100.0]
    assert rows[0]["prefill_tokens"] == 20 and rows[0]["t_prefill_ms"] == 60.5
    assert rows[1]["prefill_tokens"] == 850 and "t_prefill_ms" not in rows[1]


@pytest.mark.timeout(60)
def test_replay_with_open_files_warm_up_and_a_first_completion(tmp_path: Path) -> None:
    """Other files stay open beside the typed one, the folder is the workspace, and the first completion
    after the open is asked once the background warm-up had time to run (the fake service's warm)."""
    others = []
    for i in range(3):
        other = tmp_path / f"other{i}.py"
        other.write_text(f"def helper_{i}(name):\n    return name * {i}\n", encoding="utf-8")
        others.append(other)
    cfg = config(tmp_path, open_files=tuple(others), workspace=tmp_path, first_after_s=0.5, max_chars=20,
                 settings={"contextBudget": 256, "warmUp": True})
    report = run_replay(cfg)
    assert report.open_documents == 4  # the replay's document and the three left open
    assert report.first_ms is not None and report.first_ms >= 0
    assert report.warm["queued"] >= 1 and report.warm["finished"] >= 1
    assert report.requests >= 2  # the first completion and at least one at a pause


def test_sources_flag_maps_to_the_servers_two_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --lsp --lsp-sources` turns each context source on or off for the replayed server; a bad
    list is a one-line error before any server starts."""
    from dspark_lsp.cli import main

    assert lsp_replay.context_sources("defs") == {"contextOpenFiles": False, "contextDefinitions": True}
    assert lsp_replay.context_sources("open, defs") == {"contextOpenFiles": True, "contextDefinitions": True}
    assert lsp_replay.context_sources("none") == {"contextOpenFiles": False, "contextDefinitions": False}
    for bad in ("", "defs,tabs"):
        with pytest.raises(UserError, match="--lsp-sources"):
            lsp_replay.context_sources(bad)
    assert main(["bench", "--lsp", "--lsp-sources", "tabs"]) != 0
    err = capsys.readouterr().err
    assert "--lsp-sources" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_replay_runs_the_servers_own_prompt_settings_unless_told() -> None:
    """A replay measures what a user gets: without --context-window / --prefix-share the server keeps its
    defaults (contextWindow 768, prefixShare 0.9), not the offline bench's 256 / 0.75 prompts."""
    from dspark_lsp.bench.lsp_replay import server_settings
    from dspark_lsp.cli import build_parser

    plain = server_settings(build_parser().parse_args(["bench", "--lsp"]))
    assert "contextWindow" not in plain and "prefixShare" not in plain
    told = server_settings(build_parser().parse_args(["bench", "--lsp", "--context-window", "300",
                                                      "--prefix-share", "0.8"]))
    assert told["contextWindow"] == 300 and told["prefixShare"] == 0.8
    assert "threads" not in plain
    assert server_settings(build_parser().parse_args(["bench", "--lsp", "--lsp-threads", "2"]))["threads"] == 2


def test_the_offline_bench_keeps_its_published_prompt_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.bench import run
    from dspark_lsp.cli import build_parser

    args = build_parser().parse_args(["bench", "--methods", "target_only"])
    seen: list[tuple[int, float]] = []

    def stop_here(_methods: str) -> Any:
        seen.append((args.context_window, args.prefix_share))
        raise SystemExit(0)

    monkeypatch.setattr(run, "_chosen_methods", stop_here)
    with pytest.raises(SystemExit):
        run.run_bench(args)
    assert seen == [(run.BENCH_WINDOW, run.BENCH_PREFIX_SHARE)] == [(256, 0.75)]


@pytest.mark.timeout(60)
def test_a_mid_file_replay_keeps_the_rest_of_the_file_after_the_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--lsp-mid-file: the typed passage is cut out and typed back, so every request sees the file's text
    before the cursor as typed so far and the rest of the file, unchanged, after it."""
    seen = service_records(monkeypatch)
    cfg = config(tmp_path, keep_after=True, max_chars=40)
    start = int(len(SOURCE) * cfg.start_fraction)
    after = SOURCE[start + 40 :]
    assert after  # the fixture leaves text past the passage
    run_replay(cfg)
    assert seen
    for record in seen:
        offset = int(record["offset"])  # type: ignore[call-overload]
        assert record["text_len"] == offset + len(after)
        assert record["tail"] == SOURCE[offset - 2 : offset]


def test_fim_order_and_mid_file_flags_reach_the_replay() -> None:
    from dspark_lsp.bench.lsp_replay import server_settings
    from dspark_lsp.cli import build_parser

    plain = build_parser().parse_args(["bench", "--lsp"])
    assert "fimOrder" not in server_settings(plain) and plain.lsp_mid_file is False
    told = build_parser().parse_args(["bench", "--lsp", "--lsp-fim-order", "spm", "--lsp-mid-file"])
    assert server_settings(told)["fimOrder"] == "spm" and told.lsp_mid_file is True


@pytest.mark.timeout(60)
def test_the_replay_tells_the_server_where_the_cursor_rests_after_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As our editor clients do (dspark/cursor): the background warm-up then prefills the prompt at the
    cursor, not at the document's end, which matters once text follows the cursor (--lsp-mid-file)."""
    sent: list[tuple[str, Any]] = []
    original = lsp_replay.StdioClient.notify

    def capture(self: Any, method: str, params: Any) -> None:
        sent.append((method, params))
        original(self, method, params)

    monkeypatch.setattr(lsp_replay.StdioClient, "notify", capture)
    cfg = config(tmp_path, keep_after=True, max_chars=40)
    run_replay(cfg)
    methods = [m for m, _ in sent]
    opened = methods.index("textDocument/didOpen")
    assert methods[opened + 1] == "dspark/cursor"
    before = SOURCE[: int(len(SOURCE) * cfg.start_fraction)]
    position = sent[opened + 1][1]["position"]
    assert position == {"line": before.count("\n"), "character": lsp_replay._utf16_len(before.split("\n")[-1])}
