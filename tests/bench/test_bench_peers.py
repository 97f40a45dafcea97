"""The bench's transformers peers on a quantized target, and a method that fails (issue 33).

The target here is a tiny Qwen2 with a GGUF beside its config, so ``--dtype auto`` runs it from the
file's quantized blocks through the kernel, as the default pair's target runs; every ``hf_*`` method goes
through the bench's own code path (``dspark-lsp bench``) on that same model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from quant_testlib import model_to_gguf, prefill_scratch_made_in_inference_mode

from dspark_lsp.cli import main
from dspark_lsp.quant.build import KernelUnavailable, load_kernel

REPO = Path(__file__).resolve().parents[2]
HF_METHODS = ("hf_greedy", "hf_prompt_lookup", "hf_assisted_heuristic", "hf_assisted_constant")


@pytest.fixture(scope="module")
def quantized_target(tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny target directory (config, weights, the tiny tokenizer) with its Q8_0 GGUF beside them."""
    from transformers import AutoModelForCausalLM

    from dspark_lsp.testing.tiny import build_tiny_model

    try:
        load_kernel()
    except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
        pytest.skip(f"the quantized kernel is unavailable here: {exc}")
    target, _draft = tiny_models
    dest = tmp_path_factory.mktemp("quantized-target") / "target"
    # hidden 64: the rows of every matrix are whole Q8_0 blocks (the tiny_models target's 48 are not).
    build_tiny_model(dest, seed=3, layers=2, hidden=64, tokenizer_dir=target.parent / "tokenizer")
    model = AutoModelForCausalLM.from_pretrained(str(dest))
    model_to_gguf(dest / "model.gguf", model, {})
    return dest


def _bench(target: Path, methods: str, out: Path, *extra: str) -> int:
    return main(["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
                 "--humaneval", "none", "--limit", "1", "--max-new-tokens", "8", "--threads", "1",
                 "--methods", methods, "--json", str(out), *extra])


def test_every_transformers_method_runs_on_the_quantized_target(
    quantized_target: Path, tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dspark_lsp.models import loader

    # As on the default target on a CPU with native bf16: bf16 prefill on, and the kernel's prefill
    # buffers made under inference mode by our loop before transformers' generate writes into them.
    monkeypatch.setattr(loader, "cpu_has_native_bf16", lambda: True)
    prefill_scratch_made_in_inference_mode()
    _target, assistant = tiny_models
    out = tmp_path / "bench.json"
    rc = _bench(quantized_target, "target_only," + ",".join(HF_METHODS), out, "--assistant", str(assistant))
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["settings"]["dtype"] == "gguf"  # the target is the quantized one, not an fp32 stand-in
    assert report["model"]["assistant"] == str(assistant)
    methods = report["methods"]
    for name in HF_METHODS:
        m = methods[name]
        assert "failed" not in m and "skipped" not in m, (name, m)
        assert m["engine"] == "hf" and m["tokens"] > 0
        # Greedy decoding on the same weights: the same text as our loop's target-only decode.
        assert m["identical"] is True, name


def test_a_method_that_raises_is_reported_and_the_run_goes_on(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dspark_lsp.bench import run

    real = run._run_hf

    def flaky(bench: Any, preset: Any, pp: Any) -> list[int]:
        if preset.name == "hf_prompt_lookup":
            raise RuntimeError("simulated failure\nwith a second line")
        return real(bench, preset, pp)

    monkeypatch.setattr(run, "_run_hf", flaky)
    target, _ = tiny_models
    out = tmp_path / "bench.json"
    rc = _bench(target, "target_only,hf_greedy,hf_prompt_lookup,dspark", out)
    assert rc == 1  # the exit status says a method failed
    report = json.loads(out.read_text())  # ... and the JSON was written all the same
    methods = report["methods"]
    first = report["prompts"][0]["id"]
    assert methods["hf_prompt_lookup"] == {
        "failed": f"RuntimeError on prompt {first}: simulated failure", "prompts_run": 0}
    for name in ("target_only", "hf_greedy", "dspark"):
        assert methods[name]["identical"] is True and methods[name]["tokens"] > 0, name
    captured = capsys.readouterr()
    assert f"{'hf_prompt_lookup':24} failed: RuntimeError on prompt {first}: simulated failure" in captured.out
    assert "Traceback" not in captured.err and "hf_prompt_lookup failed" in captured.err


def test_a_failed_baseline_leaves_the_other_rows_without_comparisons(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dspark_lsp.bench import run

    real = run._run_loop
    calls = {"target_only": 0}

    def failing_on_the_second_prompt(bench: Any, preset: Any, pp: Any, r: Any, tracker: Any) -> Any:
        if preset.name == "target_only":
            calls["target_only"] += 1
            if calls["target_only"] == 2:
                raise MemoryError()
        return real(bench, preset, pp, r, tracker)

    monkeypatch.setattr(run, "_run_loop", failing_on_the_second_prompt)
    target, _ = tiny_models
    out = tmp_path / "bench.json"
    rc = _bench(target, "target_only,dspark", out)
    assert rc == 1
    report = json.loads(out.read_text())
    methods = report["methods"]
    second = report["prompts"][1]["id"]
    assert methods["target_only"] == {"failed": f"MemoryError on prompt {second}: no message", "prompts_run": 1}
    dspark = methods["dspark"]
    assert dspark["tokens"] > 0 and len(report["prompts"]) == 8  # it ran on every prompt
    assert dspark["identical"] is None and dspark["speedup"] is None  # nothing to compare with

