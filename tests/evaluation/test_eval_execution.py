"""pass@1's program runner and the eval's problem loading (HumanEval-format files written here)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.execution import humaneval_program, passes
from dspark_lsp.evaluation.problems import load_problems, parse_sets

PROMPT = 'def add(a, b):\n    """Sum."""\n'
SUFFIX = "\n\ndef twice(x):\n    return add(x, x)\n"
TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"


def write_humaneval(directory: Path, n: int = 5) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    names = {
        "single": "HumanEval-SingleLineInfilling.jsonl.gz",
        "multi": "HumanEval-MultiLineInfilling.jsonl.gz",
        "span": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
    }
    for key, fname in names.items():
        rows = [
            {
                "task_id": f"{key}/HumanEval/{i}",
                "prompt": PROMPT,
                "suffix": SUFFIX,
                "canonical_solution": "    return a + b\n",
                "test": TEST,
                "entry_point": "add",
            }
            for i in range(n)
        ]
        with gzip.open(directory / fname, "wt", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def test_program_puts_the_completion_at_the_cursor() -> None:
    text = PROMPT + "\n" + SUFFIX
    program = humaneval_program(text, len(PROMPT), "    return a + b", TEST, "add")
    assert program.startswith(PROMPT + "    return a + b\n" + SUFFIX)
    assert program.rstrip().endswith("check(add)")


def test_passes_runs_the_tests() -> None:
    text = PROMPT + "\n" + SUFFIX
    assert passes(text, len(PROMPT), "    return a + b", TEST, "add")
    assert not passes(text, len(PROMPT), "    return a - b", TEST, "add")
    assert not passes(text, len(PROMPT), "", TEST, "add")  # the docstring alone: add() returns None
    assert not passes(text, len(PROMPT), "    return a +", TEST, "add")


def test_a_looping_completion_times_out(tmp_path: Path) -> None:
    text = PROMPT + "\n" + SUFFIX
    assert not passes(text, len(PROMPT), "    while True:\n        pass", TEST, "add", timeout=1.0)


def test_programs_run_outside_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = PROMPT + "\n" + SUFFIX
    body = "    open('left_behind.txt', 'w').write('x')\n    return a + b"
    assert passes(text, len(PROMPT), body, TEST, "add")
    assert not (tmp_path / "left_behind.txt").exists()


def test_problems_recreate_the_file_and_are_seeded(tmp_path: Path) -> None:
    d = write_humaneval(tmp_path / "he", n=6)
    probs = load_problems(d, ["single", "multi"], None, limit=3, seed=7)
    assert [p.set for p in probs] == ["humaneval-single"] * 3 + ["humaneval-multi"] * 3
    for p in probs:
        # The document keeps the hole's line break: reference + document = the original file.
        assert p.text[: p.offset] + p.reference + p.text[p.offset :] == PROMPT + "    return a + b\n" + SUFFIX
        assert p.has_tests and p.language == "python"
    again = load_problems(d, ["single", "multi"], None, limit=3, seed=7)
    other = load_problems(d, ["single", "multi"], None, limit=3, seed=8)
    assert [p.id for p in probs] == [p.id for p in again]
    assert [p.id for p in probs] != [p.id for p in other]
    assert len(load_problems(d, ["span"], None, limit=0, seed=0)) == 6  # 0 = all


def test_problem_loading_errors_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown HumanEval set"):
        parse_sets("single,bogus")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="missing"):
        load_problems(tmp_path / "empty", ["single"], None, limit=1, seed=0)
    with pytest.raises(UserError, match="not a directory"):
        load_problems(None, [], tmp_path / "nope", limit=1, seed=0)
    with pytest.raises(UserError, match="--limit"):
        load_problems(None, [], None, limit=-1, seed=0)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "HumanEval-SingleLineInfilling.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(UserError, match="cannot read"):
        load_problems(bad, ["single"], None, limit=1, seed=0)


def test_the_bench_scores_pass_at_1_with_the_eval_code() -> None:
    from dspark_lsp.bench import run
    from dspark_lsp.evaluation import execution

    assert run.passes is execution.passes
    assert not hasattr(run, "_run_python_check")
