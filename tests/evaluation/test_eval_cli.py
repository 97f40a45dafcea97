"""`dspark-lsp eval` end to end on the tiny random models: the real service, decoder and syntax layer.

The models are random (their text is nonsense, so pass@1 is 0); what is checked is the contract: the
report's shape, the service's output being the start of the raw output (lossless), the oracle never
below the raw output, `--rescore` reproducing the run's service texts without the model, and one-line
errors for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.cli import main
from tests.evaluation.test_eval_execution import write_humaneval


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Any:
    """`--threads 1` sets torch's process-wide thread count: give the next tests theirs back."""
    import torch

    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


@pytest.fixture
def tiny_args(tiny_models: tuple[Path, Path]) -> list[str]:
    target, _draft = tiny_models
    return ["--model", str(target), "--draft", "ngram", "--max-new-tokens", "8", "--raw-max-tokens", "12",
            "--llamacpp", "off", "--threads", "1"]  # fmt: skip


def test_eval_report_on_tiny_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_args: list[str]
) -> None:
    he = write_humaneval(tmp_path / "he", n=3)
    out_file = tmp_path / "report.json"
    code, out, err = _run(
        capsys, *tiny_args, "--humaneval", str(he), "--sets", "single,span", "--limit", "2", "--json",
        "--out", str(out_file),
    )  # fmt: skip
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    assert json.loads(out_file.read_text()) == report
    assert "[4/4]" in err  # progress on stderr
    groups = report["groups"]
    assert set(groups) == {"humaneval-single", "humaneval-span", "all"}
    for name in ("humaneval-single", "humaneval-span"):
        g = groups[name]
        assert g["problems"] == 2 and g["service_not_within_raw"] == 0
        assert set(g["methods"]) == {"service", "raw", "oracle_cut"}
        for s in g["methods"].values():
            assert s["n"] == 2 and s["tested"] == 2 and 0.0 <= s["pass_at_1"] <= 1.0
        svc = g["methods"]["service"]
        assert svc["latency_p50_ms"] > 0
        # A cold hole's prefill is part of its latency, and its prompt is what the service built.
        assert 0 < svc["prefill_p50_ms"] <= svc["latency_p95_ms"] and svc["prompt_tokens_p50"] > 0
        assert g["methods"]["raw"]["prefill_p50_ms"] is None  # only the service reports a breakdown
    assert report["skipped"] == {"llamacpp_infill": "--llamacpp off"}
    for p in report["problems"]:
        a = p["attempts"]
        assert p["service_within_raw"] is True
        assert a["oracle_cut"]["similarity"] >= a["raw"]["similarity"]  # the full raw text is a candidate
        assert a["raw"]["text"].startswith(a["oracle_cut"]["text"])
        # The rescore reads the raw tokens back: they decode to the raw text.
        assert len(p["raw_ids"]) <= 12
        assert a["service"]["tokens"] >= 1 and a["service"]["prompt_tokens"] > 0 and "tokens" not in a["raw"]

    # --rescore: today's rules on the saved raw outputs give back the run's own service texts.
    code, out, err = _run(capsys, "--rescore", str(out_file), "--json")
    assert code == 0, err
    assert "0 of 4 service completions changed" in err
    again = json.loads(out)
    assert [p["attempts"]["service"]["text"] for p in again["problems"]] == [
        p["attempts"]["service"]["text"] for p in report["problems"]
    ]


def test_eval_on_a_corpus_groups_by_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_args: list[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    body = "".join(f"def function_number_{i}(value):\n    return value * {i} + {i}\n\n" for i in range(12))
    (src / "mod.py").write_text(body)
    js = "".join(f"function numberedFunction{i}(value) {{\n  return value * {i};\n}}\n" for i in range(12))
    (src / "mod.js").write_text(js)
    code, out, err = _run(
        capsys, *tiny_args, "--humaneval", "none", "--corpus", str(src), "--limit", "2", "--no-ceilings", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert err == ""  # --quiet
    assert "corpus-python" in out and "corpus-javascript" in out and "pass@1" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("corpus-")]
    assert len(rows) == 2 and all(" service " in r for r in rows)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--corpus", "/nonexistent/dir"], "--corpus /nonexistent/dir: not a directory"),
        (["--sets", "single,bogus"], "unknown HumanEval set"),
        (["--limit", "-1"], "--limit must be >= 0"),
        (["--humaneval", "/nonexistent/he"], "--humaneval /nonexistent/he: not a directory"),
        (["--humaneval", "none"], "no problems"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--rescore", "/nonexistent/report.json"], "not an eval report"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert code != 0
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dspark-lsp: error:") and message in lines[0], err


def test_reuse_copies_only_holes_whose_prompt_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_args: list[str]
) -> None:
    he = write_humaneval(tmp_path / "he", n=3)
    base = tmp_path / "w256.json"
    cut = tmp_path / "w40.json"
    common = [*tiny_args, "--humaneval", str(he), "--sets", "single", "--limit", "3", "--json"]
    code, out, err = _run(capsys, *common, "--context-window", "256", "--out", str(base))
    assert code == 0, err
    # Drop one hole from the saved run: it must be decoded, the other two copied.
    saved = json.loads(base.read_text())
    saved["problems"] = saved["problems"][1:]
    trimmed = tmp_path / "w256-trimmed.json"
    trimmed.write_text(json.dumps(saved))

    # A window every prompt already fits: the prompts are the same token ids, so the holes are copied.
    code, out, err = _run(capsys, *common, "--context-window", "1024", "--reuse", str(trimmed))
    assert code == 0, err
    reused = json.loads(out)
    assert "2 of 3 holes reused" in err
    assert [p["reused"] for p in reused["problems"]] == [False, True, True]
    assert reused["groups"]["humaneval-single"]["reused"] == 2
    assert reused["settings"]["reused_from"] == str(trimmed)
    # What decoding them at that window gives: the same texts as the copies.
    code, out, err = _run(capsys, *common, "--context-window", "1024")
    assert code == 0, err
    decoded = json.loads(out)
    assert [p["attempts"] for p in decoded["problems"]][0]["service"]["text"] == reused["problems"][0][
        "attempts"
    ]["service"]["text"]
    for a, b in zip(decoded["problems"], reused["problems"], strict=True):
        assert a["attempts"]["service"]["text"] == b["attempts"]["service"]["text"]
        assert a["raw_ids"] == b["raw_ids"]

    # A window that cuts every prompt: nothing can be copied.
    code, out, err = _run(
        capsys, *common, "--context-window", "40", "--context-budget", "0", "--out", str(cut), "--reuse", str(base)
    )
    assert code == 0, err
    assert "0 of 3 holes reused" in err
    assert not any(p["reused"] for p in json.loads(out)["problems"])
    # The same window with the server's context budget: what the (absent) other files leave of it widens
    # the window, so the prompts are not the cut ones and nothing is copied from that run either.
    code, out, err = _run(capsys, *common, "--context-window", "40", "--reuse", str(cut))
    assert code == 0, err
    assert "0 of 3 holes reused" in err

    # A saved run with another budget would give other completions: refused in one line.
    code, out, err = _run(capsys, *common, "--max-new-tokens", "4", "--reuse", str(base))
    assert code != 0 and out == ""
    assert err.strip().count("\n") == 0 and "its max_new_tokens is 8" in err


def test_partial_reports_carry_their_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_args: list[str]
) -> None:
    """A stopped run's report must say how it was made, or --reuse could not trust it."""
    he = write_humaneval(tmp_path / "he", n=6)
    out_file = tmp_path / "r.json"
    import dspark_lsp.evaluation.cli as cli

    written: list[dict[str, Any]] = []
    real_write = cli._write

    def spy(path: str, report: dict[str, Any]) -> None:
        written.append(json.loads(json.dumps(report)))
        real_write(path, report)

    cli._write = spy  # type: ignore[assignment]
    try:
        code, _out, err = _run(
            capsys, *tiny_args, "--humaneval", str(he), "--sets", "single", "--limit", "6", "--no-ceilings",
            "--out", str(out_file), "--prefix-share", "0.8",
        )  # fmt: skip
    finally:
        cli._write = real_write  # type: ignore[assignment]
    assert code == 0, err
    first = written[0]
    assert first["settings"]["partial"] is True and len(first["problems"]) == 5
    assert first["settings"]["service"]["context_window"] == 768  # the server's default
    assert first["settings"]["service"]["prefix_share"] == 0.8  # --prefix-share reached the service
    assert not written[-1]["settings"].get("partial")


def test_fim_order_flag_sets_the_services_arrangement() -> None:
    from dspark_lsp.cli import build_parser
    from dspark_lsp.evaluation.cli import _service_config
    from dspark_lsp.service import ServiceConfig

    assert _service_config(build_parser().parse_args(["eval"])).fim_order == ServiceConfig().fim_order
    assert _service_config(build_parser().parse_args(["eval", "--fim-order", "spm"])).fim_order == "spm"
