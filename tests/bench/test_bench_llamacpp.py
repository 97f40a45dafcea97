"""llama.cpp as a bench peer, fidelity to the fp32 reference, and the prefill/decode split of the table.

All but the last test run without the real model; the last runs llama.cpp on the default model's GGUF
(skipped when llama-cpp-python or the file is missing) and checks its greedy loop is really greedy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dspark_lsp.bench.fidelity import fidelity, first_divergence
from dspark_lsp.bench.llamacpp import LLAMACPP_MISSING, llamacpp_missing
from dspark_lsp.bench.report import MethodResult, method_entry, table_row
from dspark_lsp.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_first_divergence_on_crafted_lists() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3  # identical: its full length
    assert first_divergence([], []) == 0
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([5, 2, 3], [1, 2, 3]) == 0
    assert first_divergence([1, 2], [1, 2, 3, 4]) == 2  # stopped at EOS first: differs at its end
    assert first_divergence([1, 2, 3, 4], [1, 2]) == 2


def test_fidelity_share_mean_and_min() -> None:
    ref = [[1, 2, 3, 4], [1, 2, 3], [7, 8]]
    out = [[1, 2, 3, 4], [1, 2, 9], [6, 8]]
    f = fidelity(out, ref)
    assert f["prompts"] == 3 and f["identical_prompts"] == 1
    assert f["identical_share"] == round(1 / 3, 4)
    assert f["mean_first_divergence"] == round((4 + 2 + 0) / 3, 2)
    assert f["min_first_divergence"] == 0
    assert f["mean_reference_tokens"] == 3.0
    assert fidelity(ref, ref)["identical_share"] == 1.0
    assert fidelity([], [])["identical_share"] is None
    with pytest.raises(ValueError):
        fidelity([[1]], [])


def test_llamacpp_missing_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now raises ImportError
    assert llamacpp_missing() == LLAMACPP_MISSING
    assert "pip install 'dspark-lsp[llamacpp]'" in LLAMACPP_MISSING


def test_bench_without_llamacpp_skips_its_methods(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    target, _ = tiny_models
    out = tmp_path / "bench.json"
    rc = main(["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
               "--humaneval", "none", "--limit", "1", "--max-new-tokens", "6", "--threads", "1",
               "--methods", "target_only,target_fp32,hf_greedy,llamacpp_greedy,llamacpp_lookup,dspark",
               "--json", str(out)])
    assert rc == 0
    methods = json.loads(out.read_text())["methods"]
    for name in ("llamacpp_greedy", "llamacpp_lookup"):
        assert methods[name] == {"skipped": LLAMACPP_MISSING}
    # The tiny target is plain fp32 already: target_fp32 is that same model, run by the same loop.
    for name in ("target_only", "target_fp32", "hf_greedy", "dspark"):
        fid = methods[name]["vs_fp32"]
        assert methods[name]["identical"] is True, name
        assert fid["identical_share"] == 1.0 and fid["min_first_divergence"] == fid["mean_first_divergence"] > 0
    assert methods["target_fp32"]["mean_accepted"] == 1.0
    assert methods["target_only"]["prefill_s"] > 0 and methods["hf_greedy"]["prefill_s"] is None


def _result(name: str, engine: str, **kw: float) -> MethodResult:
    r = MethodResult(name, tokens=16, outputs=[[1, 2, 3, 4]], engine=engine)
    r.seconds = kw.get("seconds", 2.0)
    r.t_prefill = kw.get("t_prefill", 0.0)
    r.target_forwards = int(kw.get("forwards", 16))
    if engine == "hf":
        r.counts_forwards = False
        r.prefill_split = False
    return r


def test_prefill_and_decode_are_reported_apart_for_every_method_that_times_them() -> None:
    base = _result("target_only", "dspark", seconds=2.0, t_prefill=0.4)
    ref = _result("target_fp32", "dspark", seconds=4.0, t_prefill=1.0)
    ref.outputs = [[1, 2, 9, 9]]
    lcpp = _result("llamacpp_lookup", "llamacpp", seconds=1.0, t_prefill=0.2, forwards=8)
    lcpp.drafted = 30
    hf = _result("hf_greedy", "hf", seconds=3.0)

    e_base = method_entry(base, base, ref, prompt_tokens=100)
    assert e_base["prefill_s"] == 0.4 and e_base["decode_tokens_per_s"] == 10.0  # 16 tokens / 1.6 s
    assert e_base["prefill_tokens_per_s"] == 250.0 and e_base["decode_speedup"] == 1.0
    assert e_base["vs_fp32"]["identical_share"] == 0.0 and e_base["vs_fp32"]["mean_first_divergence"] == 2.0

    e_lcpp = method_entry(lcpp, base, ref, prompt_tokens=100)
    assert e_lcpp["prefill_s"] == 0.2 and e_lcpp["decode_tokens_per_s"] == 20.0  # 16 / 0.8 s
    assert e_lcpp["decode_speedup"] == 2.0 and e_lcpp["mean_accepted"] == 2.0
    assert e_lcpp["drafted_tokens"] == 30 and e_lcpp["alternates"] is None
    assert e_lcpp["time_split_s"] == {"prefill": 0.2, "draft": 0.0, "verify": None}

    e_hf = method_entry(hf, base, None, prompt_tokens=100)
    assert e_hf["prefill_s"] is None and e_hf["decode_tokens_per_s"] is None and e_hf["vs_fp32"] is None

    row_base, row_lcpp, row_hf = (table_row(n, e) for n, e in
                                  (("target_only", e_base), ("llamacpp_lookup", e_lcpp), ("hf_greedy", e_hf)))
    assert row_base.split()[3:6] == ["0.40", "10.00", "1.00"]  # prefill s, dec tok/s, decode x
    assert row_base.split()[8:10] == ["0.00", "2.0/2"]  # =fp32, div mean/min
    assert row_lcpp.split()[3:7] == ["0.20", "20.00", "2.00", "2.00"]
    assert row_lcpp.split()[-1] == "-"  # llama.cpp's decode is not split into verify and the rest
    assert row_hf.split()[3:6] == ["n/a", "n/a", "n/a"] and row_hf.split()[8:10] == ["-", "-"]
    assert table_row("llamacpp_greedy", {"skipped": LLAMACPP_MISSING}) == (
        f"{'llamacpp_greedy':24} skipped: {LLAMACPP_MISSING}")


@pytest.mark.real_model
def test_llamacpp_greedy_runner_takes_the_argmax_of_its_own_logits() -> None:
    pytest.importorskip("llama_cpp", reason=LLAMACPP_MISSING)
    import numpy as np

    from dspark_lsp.bench.llamacpp import LlamaCppRunner
    from dspark_lsp.models.loader import gguf_source
    from dspark_lsp.models.registry import QWEN_05B

    small = QWEN_05B.name  # the smaller GGUF: llama.cpp's own greedy is what is checked, not the model
    gguf = gguf_source(small, "", None)
    if gguf is None:
        pytest.skip(f"no GGUF kept for {small}; run `dspark-lsp models prepare {small}`")
    eos = [151643, 151662]  # Qwen's <|endoftext|>, <|fim_pad|>
    text = b"<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\n\nprint(add(1, 2))\n<|fim_middle|>"
    for lookup in (None, 4):
        runner = LlamaCppRunner(gguf, n_ctx=128, threads=2, lookup_tokens=lookup, prompt_logits=True)
        ids = [int(t) for t in runner.llm.tokenize(text, add_bos=False, special=True)]
        assert ids[0] == 151659 and ids[-1] == 151660  # <|fim_prefix|> ... <|fim_middle|>
        run = runner.generate(ids, 8, eos)
        assert run.tokens and len(run.tokens) <= 8 and not set(run.tokens) & set(eos)
        if len(run.tokens) < 8:  # stopped at EOS: the greedy choice after the last token
            assert int(np.argmax(runner.llm.scores[len(ids) - 1 + len(run.tokens)])) in eos
        # Row p of llm.scores holds the logits the token at p + 1 was chosen from (rejected drafts' rows are
        # overwritten by the forward after them): each token must be its row's argmax.
        rows = runner.llm.scores[len(ids) - 1 : len(ids) - 1 + len(run.tokens)]
        assert [int(i) for i in np.argmax(rows, axis=1)] == run.tokens, lookup
        assert 0 < run.t_prefill < run.seconds and 1 <= run.forwards <= len(run.tokens)
        if lookup is None:
            assert run.forwards == len(run.tokens) and run.drafted == 0
    # Its forward cost (bench --forward-cost), on a context cut to what its n_ctx leaves room for; the
    # runner decodes from scratch afterwards.
    costs = runner.forward_costs(ids * 8, (1, 3), repeats=2)
    assert set(costs) == {1, 3} and all(ms > 0 for ms in costs.values())
    assert runner.generate(ids, 2, eos).tokens == run.tokens[:2]
