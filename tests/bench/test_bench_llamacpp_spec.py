"""llamacpp_draft: llama.cpp's draft-model speculative binary as a bench peer, without the binary or a real model.

The two ``llamacpp_spec_*.jsonl`` files beside this one are real stdout of ``llama-speculative-simple
--log-jsonl --log-timestamps -lv 5`` (qwen2.5-coder-1.5b Q4_K_M with the 0.5B as draft, built from
llama-cpp-python 0.3.36's vendored llama.cpp), cut to the first 30 lines and everything from the prompt's
echo on (the lines between are model loading, which the parser skips).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from dspark_lsp.bench.llamacpp_spec import (
    SPEC_BIN_ENV,
    SPEC_BIN_MISSING,
    LlamaCppSpecRunner,
    PieceIds,
    SpecOutputError,
    cut_to_budget,
    parse_spec_output,
    spec_bin_missing,
    spec_summary,
)
from dspark_lsp.bench.report import MethodResult
from dspark_lsp.cli import main

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SAMPLE = HERE / "llamacpp_spec_sample.jsonl"  # -n 15: five rounds, 19 tokens, the last round past the budget
EOS_SAMPLE = HERE / "llamacpp_spec_eos.jsonl"  # one round, then <|endoftext|>
PROMPT = (
    '<|fim_prefix|>import os\n\n\ndef list_python_files(root):\n    """Every .py file under root, sorted."""\n'
    "    out = []\n    for dirpath, _dirs, files in os.walk(root):\n<|fim_suffix|>\n    return sorted(out)\n"
    "<|fim_middle|>"
)
OUTPUT = "        for file in files:\n            if file.endswith('.py'):\n                out.append(os.path.join"
OUTPUT_16 = OUTPUT[: -len("(os.path.join")]  # its first 16 tokens


def test_parser_reads_prompt_tokens_rounds_and_figures_of_a_real_run() -> None:
    out = parse_spec_output(SAMPLE.read_text())
    # FIM markers were parsed as special tokens: one piece each, and 47 tokens in all, as its own count says.
    assert len(out.prompt_pieces) == 47 and "".join(out.prompt_pieces) == PROMPT
    assert out.prompt_pieces[0] == "<|fim_prefix|>" and out.prompt_pieces[-1] == "<|fim_middle|>"
    assert "".join(out.pieces) == OUTPUT and len(out.pieces) == 19
    assert out.rounds == [(3, 3), (3, 3), (3, 3), (2, 2), (3, 3)]
    assert out.piece_round == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 3 + [4] * 4
    assert out.t_encode == 6.88 and out.t_decode == 27.876 and out.end_us == 45589098
    assert out.counts == {"n_predict": 19, "n_drafted": 14, "n_accept": 14}
    assert out.piece_us[0] == 26083150 and out.piece_us == sorted(out.piece_us)


def test_cut_to_budget_counts_only_the_rounds_that_made_the_budget() -> None:
    out = parse_spec_output(SAMPLE.read_text())
    full = cut_to_budget(out, 16)  # -n 15 with a budget of 16: the fifth round's first token is the last
    assert len(full.pieces) == 16 and full.pieces[-1] == ".append"
    assert full.forwards == 6 and full.drafted == 14 and full.t_prefill == 6.88
    # Its decode started t_decode before the "encoded" line; it ends when token 16 was logged.
    assert full.seconds == pytest.approx(6.88 + (45589077 - (45589098 - 27.876e6)) / 1e6)
    assert full.seconds < out.t_encode + out.t_decode
    assert full.t_first == pytest.approx(6.88 + (26083150 - (45589098 - 27.876e6)) / 1e6)
    twelve = cut_to_budget(out, 12)  # the end of the third round: the fourth is not counted
    assert (twelve.forwards, twelve.drafted, twelve.pieces[-1]) == (4, 9, "py")
    assert (cut_to_budget(out, 13).forwards, cut_to_budget(out, 13).drafted) == (5, 11)
    assert cut_to_budget(out, 100).pieces == out.pieces


def test_an_end_of_text_first_ends_the_output_there() -> None:
    out = parse_spec_output(EOS_SAMPLE.read_text())
    assert len(out.prompt_pieces) == 31 and out.pieces == ["a", " +", " b"]  # <|endoftext|> is not printed
    run = cut_to_budget(out, 32)
    assert run.pieces == ["a", " +", " b"] and run.forwards == 2 and run.drafted == 3


def test_output_without_its_figures_or_rounds_is_refused() -> None:
    lines = SAMPLE.read_text().splitlines()
    no_rounds = [x for x in lines if "accepted" not in x]  # as printed without -lv 5
    with pytest.raises(SpecOutputError, match="per-round"):
        parse_spec_output("\n".join(no_rounds))
    no_encoded = [x for x in lines if "encoded" not in x]
    with pytest.raises(SpecOutputError, match="encoded"):
        parse_spec_output("\n".join(no_encoded))
    with pytest.raises(SpecOutputError):
        parse_spec_output("plain text, not --log-jsonl\n")


def test_missing_binary_gives_a_one_line_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPEC_BIN_ENV, raising=False)
    assert spec_bin_missing(None) == SPEC_BIN_MISSING and "\n" not in SPEC_BIN_MISSING
    assert "--llamacpp-spec-bin" in SPEC_BIN_MISSING and SPEC_BIN_ENV in SPEC_BIN_MISSING
    assert "not an executable file" in str(spec_bin_missing(str(tmp_path / "nope")))
    monkeypatch.setenv(SPEC_BIN_ENV, sys.executable)
    assert spec_bin_missing(None) is None


def _fake_binary(tmp_path: Path, sample: Path) -> str:
    """A stand-in for the binary: prints the captured run and records its arguments."""
    script = tmp_path / "llama-speculative-simple"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/args"\ncat "{sample}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_runner_passes_the_prompt_as_is_and_reads_its_run(tmp_path: Path) -> None:
    table = {p: i for i, p in enumerate(dict.fromkeys(parse_spec_output(SAMPLE.read_text()).prompt_pieces +
                                                      parse_spec_output(SAMPLE.read_text()).pieces))}
    runner = LlamaCppSpecRunner(_fake_binary(tmp_path, SAMPLE), Path("t.gguf"), Path("d.gguf"), n_ctx=256, threads=2,
                                draft_max=0, piece_ids=lambda ps: [table[p] for p in ps])
    ours = [table[p] for p in parse_spec_output(SAMPLE.read_text()).prompt_pieces]
    ids, run = runner.generate("p0", ours, PROMPT, 16)
    args = (tmp_path / "args").read_text().split("\n")
    assert args[args.index("-n") + 1] == "15" and "--no-escape" in args and "--spec-draft-n-max" not in args
    assert args[args.index("-md") + 1] == "d.gguf" and args[args.index("--temp") + 1] == "0"
    assert "--log-jsonl" in args and args[args.index("-lv") + 1] == "5"
    assert len(ids) == 16 and run.forwards == 6
    rec = runner.records[0]
    assert rec.prompt_tokens == rec.our_prompt_tokens == 47 and rec.same_prompt_ids and rec.text == OUTPUT_16
    assert "--spec-draft-n-max" in LlamaCppSpecRunner(**{**vars(runner), "draft_max": 5}).command("x", 4)

    r = MethodResult("llamacpp_draft", engine="llamacpp", tokens=len(ids), seconds=run.seconds, outputs=[ids])
    greedy = MethodResult("llamacpp_greedy", engine="llamacpp", outputs=[ids])
    summary = spec_summary(runner, r, greedy, decode=lambda xs: OUTPUT_16)
    assert summary["identical_to_llamacpp_greedy"] is True and summary["same_text_as_llamacpp_greedy"] is True
    assert summary["acceptance"] == 1.0 and summary["prompt_tokens_match"] is True
    json.dumps(summary)  # goes into the bench's JSON


def test_piece_ids_maps_each_printed_piece_back_and_retokenizes_shared_ones() -> None:
    class Tok:
        vocab = ["a", " +", "\ufffd", "\ufffd", "<|fim_middle|>"]  # two byte pieces print alike

        def __len__(self) -> int:
            return len(self.vocab)

        def decode(self, ids: list[int], **_: object) -> str:
            return "".join(self.vocab[i] for i in ids)

        def encode(self, text: str, **_: object) -> list[int]:
            return [99] * len(text)

    pieces = PieceIds(Tok())
    assert pieces(["a", " +", "<|fim_middle|>"]) == [0, 1, 4] and pieces.unmapped == 0
    assert pieces(["\ufffd"]) == [99] and pieces.unmapped == 1


def test_bench_without_the_binary_skips_llamacpp_draft(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SPEC_BIN_ENV, raising=False)
    target, _ = tiny_models
    out = tmp_path / "bench.json"
    rc = main(["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
               "--humaneval", "none", "--limit", "1", "--max-new-tokens", "4", "--threads", "1",
               "--methods", "target_only,llamacpp_draft", "--json", str(out)])
    assert rc == 0
    methods = json.loads(out.read_text())["methods"]
    assert methods["llamacpp_draft"] == {"skipped": SPEC_BIN_MISSING}
    # With a binary but no GGUF file for the target (the tiny model has none): skipped, saying so.
    monkeypatch.setenv(SPEC_BIN_ENV, _fake_binary(tmp_path, SAMPLE))
    assert main(["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
                 "--humaneval", "none", "--limit", "1", "--max-new-tokens", "4", "--threads", "1",
                 "--methods", "llamacpp_draft", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["methods"]["llamacpp_draft"]["skipped"].startswith("no GGUF file for")
    assert os.environ[SPEC_BIN_ENV]
