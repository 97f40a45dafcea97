"""`dspark-lsp bench` end to end on tiny models: every method runs or is reported skipped, outputs match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_bench_runs_every_method_on_corpus_prompts(tiny_models: tuple[Path, Path], tmp_path: Path) -> None:
    target, _draft = tiny_models
    out = tmp_path / "bench.json"
    rc = main(
        [
            "bench",
            "--model", str(target),
            "--draft", "ngram",
            "--corpus", str(REPO / "bench" / "corpus"),
            "--humaneval", "none",
            "--limit", "1",
            "--max-new-tokens", "8",
            "--threads", "1",
            "--methods", "target_only,hf_greedy,hf_prompt_lookup,hf_assisted_heuristic,fixed_k,dspark,dspark_relaxed",
            "--json", str(out),
        ]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["model"]["target"] == str(target)
    assert len(report["prompts"]) == 8  # one hole per language in the corpus
    methods = report["methods"]
    # No HF assistant for an n-gram pair: reported as skipped, not dropped.
    assert "skipped" in methods["hf_assisted_heuristic"]
    for name in ("target_only", "hf_greedy", "fixed_k", "dspark"):
        m = methods[name]
        assert m["identical"] is True, name
        assert m["tokens"] > 0 and m["tokens_per_s"] > 0
    assert methods["target_only"]["speedup"] == 1.0
    assert methods["target_only"]["mean_accepted"] == 1.0
    assert methods["hf_greedy"]["mean_accepted"] is None  # HF does not expose its forward count
    # Decode-only rates exist for our loops (they time their prefill), not for HF's generate.
    assert methods["target_only"]["decode_speedup"] == 1.0
    assert methods["dspark"]["decode_tokens_per_s"] > methods["dspark"]["tokens_per_s"]
    assert methods["hf_greedy"]["decode_speedup"] is None
    assert methods["dspark"]["target_forwards"] <= methods["target_only"]["target_forwards"]
    langs = set(methods["dspark"]["by_language"])
    assert {"python", "rust", "go", "cpp"} <= langs


def test_bench_rejects_a_prefix_share_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--prefix-share", "1.5", "--humaneval", "none"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prefix-share" in err[0]


def test_bench_rejects_unknown_methods(tiny_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    target, _ = tiny_models
    rc = main(["bench", "--model", str(target), "--methods", "target_only,warp_drive", "--humaneval", "none"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warp_drive" in err[0]


def test_bench_chain_only_ablation(tiny_models: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = tiny_models
    out = tmp_path / "bench.json"
    rc = main(["bench", "--model", str(target), "--draft", str(draft), "--corpus", str(REPO / "bench" / "corpus"),
               "--humaneval", "none", "--limit", "1", "--max-new-tokens", "8", "--threads", "1",
               "--methods", "target_only,dspark,dspark_chain", "--json", str(out)])
    assert rc == 0
    methods = json.loads(out.read_text())["methods"]
    for name in ("dspark", "dspark_chain"):
        assert methods[name]["identical"] is True, name
        alt = methods[name]["alternates"]
        assert 0 <= alt["accepted"] <= alt["proposed"]
    assert methods["dspark_chain"]["alternates"]["proposed"] == 0
    assert methods["target_only"]["alternates"] == {"proposed": 0, "accepted": 0}


def test_bench_lookup_searches_the_document_outside_the_window_unless_ablated(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dspark_lsp.drafts.ngram import NgramDraftSource

    seen: list[int] = []
    real = NgramDraftSource.propose

    def spy(self: NgramDraftSource, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(self.extra_corpus))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(NgramDraftSource, "propose", spy)
    target, _ = tiny_models
    sizes: dict[str, list[int]] = {}
    for method in ("dspark", "dspark_window_only"):
        seen.clear()
        out = tmp_path / f"{method}.json"
        rc = main(["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
                   "--humaneval", "none", "--limit", "1", "--max-new-tokens", "6", "--threads", "1",
                   "--context-window", "64", "--methods", f"target_only,{method}", "--json", str(out)])
        assert rc == 0
        report = json.loads(out.read_text())
        assert report["methods"][method]["identical"] is True
        # --context-window is the whole prompt: no context budget widens the bench's one-file window.
        assert report["prompts"] and all(p["prompt_tokens"] <= 64 for p in report["prompts"])
        sizes[method] = list(seen)
    # Corpus files are ~220 lines: a 64-token window leaves most of each file to the lookup.
    assert sizes["dspark"] and min(sizes["dspark"]) > 100
    assert sizes["dspark_window_only"] and max(sizes["dspark_window_only"]) == 0


def test_each_method_preset_changes_the_service_decode_settings_as_named() -> None:
    from types import SimpleNamespace

    from dspark_lsp.bench.methods import ABLATIONS, BY_NAME, DEFAULT_METHODS, METHODS, LoopMethod
    from dspark_lsp.bench.run import Calibration, _decode_config
    from dspark_lsp.drafts.ngram import NgramDraftSource
    from dspark_lsp.service import ServiceConfig

    bench: Any = SimpleNamespace(
        service=SimpleNamespace(config=ServiceConfig()),
        args=SimpleNamespace(max_new_tokens=8, fixed_k=4),
        calibration=Calibration(raw_ms={1: 10.0, 2: 9.0}, verify_cost={1: 9.0, 2: 9.0}, pad_to={1: 2}),
        draft=NgramDraftSource(),
    )
    base = ServiceConfig().decode_config(8, {1: 9.0, 2: 9.0}, {1: 2})

    def preset(name: str) -> LoopMethod:
        p = BY_NAME[name]
        assert isinstance(p, LoopMethod)
        return p

    def cfg(name: str) -> Any:
        return _decode_config(bench, preset(name))

    assert cfg("dspark") == base and cfg("target_only") == base and cfg("dspark_window_only") == base
    assert cfg("target_fp32").pad_to is None
    assert cfg("dspark_chain").alternates == 0 and cfg("dspark_relaxed").relaxed is True
    assert cfg("draft_ar_only").draft_mode == "ar" and cfg("draft_parallel_only").draft_mode == "parallel"
    fixed = cfg("fixed_k")
    assert fixed.scheduler.fixed_k == 4 and fixed.draft_mode == "parallel"  # the n-gram source's own step
    assert preset("dspark_window_only").lookup_outside_window is False
    assert set(DEFAULT_METHODS) | set(ABLATIONS) == set(METHODS) and not set(DEFAULT_METHODS) & set(ABLATIONS)


def test_bench_json_into_a_new_folder_is_written_and_a_directory_is_refused_before_the_run(
    tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json DIR/new/out.json` used to end a finished run in a traceback (FileNotFoundError) and lose
    its table's JSON; now the folder is made. A directory given as the file is a one-line error at once."""
    target, _draft = tiny_models
    base = ["bench", "--model", str(target), "--draft", "ngram", "--corpus", str(REPO / "bench" / "corpus"),
            "--humaneval", "none", "--limit", "1", "--max-new-tokens", "4", "--threads", "1",
            "--methods", "target_only"]
    out = tmp_path / "new" / "deeper" / "bench.json"
    assert main([*base, "--json", str(out)]) == 0
    assert "target_only" in json.loads(out.read_text())["methods"]
    capsys.readouterr()
    rc = main([*base, "--json", str(tmp_path)])
    _out, err = capsys.readouterr()
    assert rc == 2 and err.strip().splitlines() == [f"dspark-lsp: error: --json {tmp_path} is a directory; give a file name"]


def test_lookup_only_drops_the_draft_model_behind_the_pairs_lookup(tiny_models: tuple[Path, Path], tmp_path: Path) -> None:
    """`dspark_lookup_only` decodes with the hybrid draft's n-gram link alone (no draft forwards, same
    output); a pair that drafts by n-gram only has no model to drop, so the method is skipped there."""
    target, draft = tiny_models
    base = ["bench", "--model", str(target), "--corpus", str(REPO / "bench" / "corpus"), "--humaneval", "none",
            "--limit", "1", "--max-new-tokens", "8", "--threads", "1", "--methods", "target_only,dspark,dspark_lookup_only"]
    out = tmp_path / "hybrid.json"
    assert main([*base, "--draft", str(draft), "--json", str(out)]) == 0
    methods = json.loads(out.read_text())["methods"]
    assert methods["dspark"]["draft_forwards"] > 0
    assert methods["dspark_lookup_only"]["identical"] is True and methods["dspark_lookup_only"]["draft_forwards"] == 0
    out = tmp_path / "ngram.json"
    assert main([*base, "--draft", "ngram", "--json", str(out)]) == 0
    assert "n-gram only" in json.loads(out.read_text())["methods"]["dspark_lookup_only"]["skipped"]
