"""The `dspark-lsp` command line: one-line errors with exit code 2, and `complete` on tiny models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.cli import main

SOURCE = "def add(a, b):\n    return a + b\n\nresult = add(\n"


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    p = tmp_path / "example.py"
    p.write_text(SOURCE)
    return p


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never touch the network from tests (an unknown model name would otherwise be tried on the hub).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run_main(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(rc: int, out: str, err: str, *needles: str) -> None:
    lines = err.splitlines()
    assert rc == 2
    assert out == ""
    assert len(lines) == 1, f"expected one stderr line, got: {err!r}"
    assert lines[0].startswith("dspark-lsp: error: ")
    for needle in needles:
        assert needle in lines[0]


def complete_args(path: Path | str, line: int = 3, col: int = 13, *extra: str) -> list[str]:
    return ["complete", str(path), "--line", str(line), "--col", str(col), *extra]


# ------------------------------------------------------------------------------------------ errors
def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run_main(capsys, complete_args(tmp_path / "nope.py", 0, 0))
    assert_one_error_line(rc, out, err, "nope.py", "no such file")


def test_directory_instead_of_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run_main(capsys, complete_args(tmp_path, 0, 0))
    assert_one_error_line(rc, out, err, "directory")


@pytest.mark.parametrize(
    ("line", "col", "needle"), [(9, 0, "line 9"), (0, 40, "column 40"), (-1, 0, "negative")]
)
def test_position_outside_the_document(
    capsys: pytest.CaptureFixture[str], source_file: Path, line: int, col: int, needle: str
) -> None:
    rc, out, err = run_main(capsys, complete_args(source_file, line, col))
    assert_one_error_line(rc, out, err, needle)


def test_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "a.out"
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    rc, out, err = run_main(capsys, complete_args(p, 0, 0))
    assert_one_error_line(rc, out, err, "binary")


def test_invalid_utf8_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "latin.py"
    p.write_bytes(b"x = '\xe9'\n")
    rc, out, err = run_main(capsys, complete_args(p, 0, 0))
    assert_one_error_line(rc, out, err, "UTF-8")


def test_unknown_model_name_json(capsys: pytest.CaptureFixture[str], source_file: Path) -> None:
    rc, out, err = run_main(
        capsys, complete_args(source_file, 3, 13, "--model", "no-such-model-xyz", "--json")
    )
    assert_one_error_line(rc, out, err, "no-such-model-xyz")


def test_unknown_model_name(capsys: pytest.CaptureFixture[str], source_file: Path) -> None:
    rc, out, err = run_main(capsys, complete_args(source_file, 3, 13, "--model", "no-such-model-xyz"))
    assert_one_error_line(rc, out, err, "no-such-model-xyz")


def test_missing_model_directory(
    capsys: pytest.CaptureFixture[str], source_file: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "model"
    rc, out, err = run_main(capsys, complete_args(source_file, 3, 13, "--model", str(missing), "--json"))
    assert_one_error_line(rc, out, err, "does not exist")


def test_model_not_prepared_says_what_to_run(
    capsys: pytest.CaptureFixture[str], source_file: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-cache"
    rc, out, err = run_main(
        capsys,
        complete_args(
            source_file, 3, 13, "--model", "qwen2.5-coder-0.5b", "--cache-dir", str(empty), "--json"
        ),
    )
    assert_one_error_line(rc, out, err, "not prepared", "dspark-lsp models prepare qwen2.5-coder-0.5b")
    assert not empty.exists() or not any(empty.rglob("*.safetensors"))


def test_invalid_option_value(capsys: pytest.CaptureFixture[str], source_file: Path) -> None:
    rc, out, err = run_main(capsys, complete_args(source_file, 3, 13, "--context-window", "5", "--json"))
    assert_one_error_line(rc, out, err, "contextWindow")


@pytest.mark.parametrize("server_flag", [["--stdio"], ["--tcp", "127.0.0.1:9999"]])
def test_server_flag_with_a_sub_command(
    capsys: pytest.CaptureFixture[str], source_file: Path, server_flag: list[str]
) -> None:
    rc, out, err = run_main(capsys, [*server_flag, *complete_args(source_file)])
    assert_one_error_line(rc, out, err, "--stdio/--tcp")


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_main(capsys, [])
    assert rc == 2 and out == "" and "usage: dspark-lsp" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_main(capsys, ["--version"])
    assert rc == 0 and out.startswith("dspark-lsp ") and out.strip().split()[-1][0].isdigit()


# -------------------------------------------------------------------------------------- completion
def test_complete_json_on_tiny_models(
    capsys: pytest.CaptureFixture[str], source_file: Path, tiny_models: tuple[Path, Path], tiny_tokenizer: Any
) -> None:
    target, _draft = tiny_models
    rc, out, err = run_main(
        capsys,
        complete_args(
            source_file, 3, 13, "--model", str(target), "--draft", "ngram", "--json", "--max-new-tokens", "16"
        ),
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1, "exactly one JSON object on stdout"
    obj = json.loads(lines[0])
    assert {"text", "prompt", "completion_ids", "stats"} <= obj.keys()
    assert isinstance(obj["text"], str) and obj["text"]
    # Suffix first; the prefix's last token, `(`, is backed off and spelled again by the completion's ids.
    assert obj["prompt"] == f"<|fim_prefix|><|fim_suffix|>\n<|fim_middle|>{SOURCE[:-2]}"
    assert all(isinstance(i, int) for i in obj["completion_ids"]) and obj["completion_ids"]
    decoded = tiny_tokenizer.decode(
        obj["completion_ids"], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    assert decoded.startswith("(" + obj["text"])
    stats = obj["stats"]
    assert isinstance(stats["tokens"], int) and 1 <= stats["tokens"] <= 16
    assert isinstance(stats["seconds"], float | int) and stats["seconds"] >= 0
    assert isinstance(stats["target_forwards"], int) and stats["target_forwards"] >= 1
    assert stats["draft"] == "ngram"
    assert obj["scope"] == "single_line"


def test_complete_plain_output(
    capsys: pytest.CaptureFixture[str], source_file: Path, tiny_models: tuple[Path, Path]
) -> None:
    target, draft = tiny_models
    rc, out, err = run_main(
        capsys,
        complete_args(
            source_file, 3, 13, "--model", str(target), "--draft", str(draft), "--max-new-tokens", "16"
        ),
    )
    assert rc == 0, err
    assert out.endswith("\n") and out.strip()
    assert "target forwards" in err and "tokens/forward" in err


def test_dspark_lsp_executable_reports_errors_on_one_line(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("dspark-lsp")
    assert exe.exists(), "the console script is installed with the package"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [str(exe), "complete", str(tmp_path / "missing.py"), "--line", "0", "--col", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"dspark-lsp: error: {tmp_path / 'missing.py'}: no such file"]
