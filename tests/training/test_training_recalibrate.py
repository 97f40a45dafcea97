"""`python -m dspark_lsp.training.recalibrate`: its one-line errors (before any model loads) and the pairs it fits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dspark_lsp.training.recalibrate import _judged_logits, main


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "out"), "--set", str(tmp_path / "set.json"),
            "--target", "qwen2.5-coder-0.5b", "--cost", '{"1": 10}', *extra]


def test_rounds_below_one_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(tmp_path, "--rounds", "0")) == 2
    assert capsys.readouterr().err == "dspark-lsp: error: --rounds must be at least 1\n"
    assert not (tmp_path / "out").exists()


def test_a_missing_calibration_set_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("dspark-lsp: error: ") and "set.json" in err and err.count("\n") == 1


def test_required_flags_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([])
    assert stop.value.code == 2 and "--draft" in capsys.readouterr().err


def test_judged_logits_are_the_clamped_confidences_log_odds() -> None:
    p, labels, logits = _judged_logits([(0.5, True, 0), (1.0, False, 1), (0.8, True, -1)])
    assert labels.tolist() == [1.0, 0.0, 1.0]
    assert p[1].item() < 1.0  # clamped: a stated 1.0 has finite log-odds
    assert logits[0].item() == pytest.approx(0.0)
    assert logits[2].item() == pytest.approx(math.log(0.8 / 0.2), rel=1e-5)
    assert math.isfinite(logits[1].item())
