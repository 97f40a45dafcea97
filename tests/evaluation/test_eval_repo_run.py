"""`eval --repo`'s runner and scores, with a fake service and a fake peer (no model).

The fake service answers the target only when the request carries other files' context, so the
records show whether each variant's context reached the request; it also records the configs it was
given, so the variants' prompt budgets are checked as the service sees them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dspark_lsp.cli import main
from dspark_lsp.contract import CompletionRequest, CompletionResult, CompletionStats
from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.repo_fetch import DONE_MARK, Manifest, Package, unpack_dir
from dspark_lsp.evaluation.repo_imports import PackageTree
from dspark_lsp.evaluation.repo_peer import PeerAnswer
from dspark_lsp.evaluation.repo_report import _main as repo_report_main
from dspark_lsp.evaluation.repo_report import make_record, score, summarise
from dspark_lsp.evaluation.repo_run import PEER, RepoRunConfig, interleave, run_set
from dspark_lsp.evaluation.repo_set import Hole, file_holes
from dspark_lsp.service import ServiceConfig

UTIL = "def helper(x):\n    return x * 2\n\n\ndef scale(value, factor):\n    return value * factor\n"
CORE = (
    "from .util import helper, scale\n\n\n"
    "def run(v):\n"
    "    y = helper(v + 1)\n"
    "    return scale(y, 3)\n"
)


@dataclass
class FakeService:
    config: ServiceConfig = field(default_factory=lambda: ServiceConfig(context_window=1024, context_budget=256))
    configs: list[ServiceConfig] = field(default_factory=list)
    requests: list[CompletionRequest] = field(default_factory=list)
    targets: dict[int, str] = field(default_factory=dict)  # cursor offset -> the right answer
    description: str = "fake"

    def update_config(self, config: ServiceConfig) -> None:
        self.config = config
        self.configs.append(config)

    def complete(self, req: CompletionRequest) -> CompletionResult:
        self.requests.append(req)
        right = self.targets.get(req.offset, "?")
        text = right if req.context else right[:-1] + "#"  # one character off without context
        prompt = f"<ctx {len(req.context)}>{req.text[: req.offset]}"
        return CompletionResult(text=text + "\nsecond line", prompt=prompt, completion_ids=[], scope="single_line",
                                stats=CompletionStats(latency_ms=10.0 * (1 + len(req.context)), prompt_tokens=7))  # fmt: skip


@dataclass
class FakePeer:
    prompts: list[str] = field(default_factory=list)

    def complete(self, prompt: str) -> PeerAnswer:
        self.prompts.append(prompt)
        return PeerAnswer("peer", 1, 3, 5.0)


@pytest.fixture
def fetched(tmp_path: Path) -> tuple[Manifest, Path, list[Hole]]:
    pkg = Package("p", "1", "pypi", "python", "p-1.tar.gz", "0" * 64, "p-1", "p", ("p",))
    cache = tmp_path / "cache"
    root = unpack_dir(pkg, cache) / pkg.root
    (root / "p").mkdir(parents=True)
    (root / "p/__init__.py").write_text("")
    (root / "p/util.py").write_text(UTIL)
    (root / "p/core.py").write_text(CORE)
    (unpack_dir(pkg, cache) / DONE_MARK).write_text("x")
    holes = file_holes(pkg, "p/core.py", CORE, PackageTree(root, "python"))
    assert [h.target for h in holes] == ["v + 1)", "y, 3)"]
    return Manifest((pkg,)), cache, holes


def _targets(holes: list[Hole]) -> dict[int, str]:
    lines = CORE.splitlines(keepends=True)
    return {sum(len(x) for x in lines[: h.line - 1]) + h.column: h.target for h in holes}


def test_variants_reach_the_service_with_their_budgets_and_context(
    fetched: tuple[Manifest, Path, list[Hole]], tmp_path: Path
) -> None:
    manifest, cache, holes = fetched
    service, peer = FakeService(targets=_targets(holes)), FakePeer()
    cfg = RepoRunConfig(["today", "window", "+open"], peer_after="+open", out=tmp_path / "out")
    report = run_set(service, service.config, manifest, cache, [("python", h) for h in holes], cfg,
                     {"model": "fake", "service": {}}, peer)  # fmt: skip
    budgets = [(c.context_window, c.context_budget, c.context_open_files) for c in service.configs]
    assert budgets == [(256, 0, False), (1024, 0, False), (768, 256, True)] * 2
    first = service.requests[0]
    assert first.text[: first.offset].endswith("y = helper(") and first.text[first.offset] == "\n"
    assert first.prompt_path == "p/core.py" and first.repo_name == "p" and first.context == ()
    opened = service.requests[2].context
    assert opened and {c.path for c in opened} == {"p/util.py"}  # the chunk of the file core.py imports
    by = {(r["hole"], r["method"]): r for r in report["records"]}
    h0 = holes[0].id
    assert by[(h0, "+open")]["em"] is True and by[(h0, "+open")]["text"] == "v + 1)"  # first line only
    assert by[(h0, "today")]["em"] is False and 0.8 < by[(h0, "today")]["es"] < 1.0
    assert by[(h0, PEER)]["text"] == "peer"
    assert peer.prompts == [f"<ctx {len(opened)}>" + first.text[: first.offset],
                            f"<ctx {len(service.requests[5].context)}>" + service.requests[5].text[: service.requests[5].offset]]  # fmt: skip
    summary = report["summary"]
    assert summary["python"]["+open"]["em"] == 1.0 and summary["python"]["today"]["em"] == 0.0
    assert summary["all"]["+open"]["latency_p50_ms"] == 20.0
    saved = json.loads((tmp_path / "out/report.json").read_text())
    assert saved["summary"] == summary
    assert "| +open | 1.000 | 1.000 |" in (tmp_path / "out/table.md").read_text()


def test_a_second_pass_adds_only_missing_pairs(
    fetched: tuple[Manifest, Path, list[Hole]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, cache, holes = fetched
    settings: dict[str, object] = {"model": "fake", "service": {}, "variants": {"today": {}},
                                   "passes": [{"variants": ["today"]}]}  # fmt: skip
    first = FakeService(targets=_targets(holes))
    run_set(first, first.config, manifest, cache, [("python", h) for h in holes],
            RepoRunConfig(["today"], peer_after=None, out=tmp_path), settings)  # fmt: skip
    second = FakeService(targets=_targets(holes))
    settings = {"model": "fake", "service": {}, "variants": {"window": {}}, "passes": [{"variants": ["window"]}]}
    report = run_set(second, second.config, manifest, cache, [("python", h) for h in holes],
                     RepoRunConfig(["today", "window"], peer_after=None, out=tmp_path), settings)  # fmt: skip
    assert len(second.requests) == 2  # only "window", once a hole
    assert sorted((r["hole"], r["method"]) for r in report["records"]) == sorted(
        (h.id, m) for h in holes for m in ("today", "window")
    )
    third = FakeService(targets=_targets(holes))
    settings = {"model": "fake", "service": {}, "variants": {"+open": {}}, "passes": [{"variants": ["+open"]}]}
    report = run_set(third, third.config, manifest, cache, [("python", holes[0])],
                     RepoRunConfig(["+open"], peer_after=None, out=tmp_path), settings)  # fmt: skip
    assert report["methods"] == ["today", "window", "+open"]  # earlier passes' methods stay in the table
    assert report["summary"]["python"]["today"]["n"] == 1  # the holes all three answered
    assert len(settings["passes"]) == 3 and set(settings["variants"]) == {"today", "window", "+open"}
    assert repo_report_main([str(tmp_path / "report.json"), "--methods", "today,window"]) == 0
    assert "### python (2 holes)" in capsys.readouterr().out
    assert repo_report_main([str(tmp_path / "report.json"), "--methods", "all"]) == 2
    other = tmp_path / "other"
    run_set(FakeService(targets=_targets(holes)), ServiceConfig(), manifest, cache, [("python", holes[1])],
            RepoRunConfig(["+defs"], peer_after=None, out=other), {"model": "fake", "service": {}})  # fmt: skip
    capsys.readouterr()
    assert repo_report_main([str(tmp_path / "report.json"), str(other / "report.json"), "--methods", "today,+defs"]) == 0
    assert "### python (1 holes)" in capsys.readouterr().out  # merged: the one hole both passes answered
    with pytest.raises(UserError, match="another model"):
        run_set(second, second.config, manifest, cache, [], RepoRunConfig(["today"], out=tmp_path),
                {"model": "other", "service": {}})  # fmt: skip


def test_definitions_variant_resolves_the_import_over_the_package(
    fetched: tuple[Manifest, Path, list[Hole]], tmp_path: Path
) -> None:
    manifest, cache, holes = fetched
    service = FakeService(targets=_targets(holes))
    run_set(service, service.config, manifest, cache, [("python", holes[0])], RepoRunConfig(["+defs"], peer_after=None),
            {"model": "fake", "service": {}})  # fmt: skip
    (req,) = service.requests
    assert req.context and all(c.source == "definition" for c in req.context)
    assert any(c.path == "p/util.py" and "def helper(x)" in c.text for c in req.context)


def test_the_peer_can_run_in_a_later_pass_on_the_saved_prompts(
    fetched: tuple[Manifest, Path, list[Hole]], tmp_path: Path
) -> None:
    manifest, cache, holes = fetched
    items = [("python", h) for h in holes]
    first = FakeService(targets=_targets(holes))
    run_set(first, first.config, manifest, cache, items, RepoRunConfig(["+open"], peer_after="+open", out=tmp_path),
            {"model": "fake", "service": {}})  # fmt: skip
    shown = [r.text[: r.offset] for r in first.requests]
    second, peer = FakeService(targets=_targets(holes)), FakePeer()
    report = run_set(second, second.config, manifest, cache, items,
                     RepoRunConfig(["+open"], peer_after="+open", out=tmp_path), {"model": "fake", "service": {}},
                     peer)  # fmt: skip
    assert second.requests == []  # no decode: the prompts came from the first pass's file
    assert [p.split(">", 1)[1] for p in peer.prompts] == shown
    assert sum(r["method"] == PEER for r in report["records"]) == 2


def test_interleave_takes_the_first_holes_of_each_language() -> None:
    def h(i: int) -> Hole:
        return Hole(str(i), "p", "f", i, 0, "n", "t", ())

    got = interleave({"python": [h(1), h(2), h(3)], "go": [h(7)]}, limit=2)
    assert [(lang, x.id) for lang, x in got] == [("python", "1"), ("go", "7"), ("python", "2")]


def test_scores_first_line_with_whitespace_collapsed() -> None:
    assert score("  f(a,   b)\nnext", "f(a, b)") == (True, 1.0)
    em, es = score("abd", "abc")
    assert em is False and es == pytest.approx(2 / 3)
    assert score("", "") == (True, 1.0) and score("", "xy") == (False, 0.0)


def test_summary_compares_only_holes_every_method_answered() -> None:
    recs = [make_record("a", "go", "today", "x", "x", 1.0), make_record("a", "go", "all", "y", "x", 3.0),
            make_record("b", "go", "today", "x", "x", 2.0)]  # fmt: skip
    s = summarise(recs, ["today", "all"])
    assert s["go"]["today"]["n"] == 1 and s["go"]["today"]["em"] == 1.0 and s["go"]["all"]["em"] == 0.0
    assert set(s) == {"go", "all"}


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--repo", str(tmp_path)]) != 0
    assert "no manifest.json" in capsys.readouterr().err
    bench = Path(__file__).resolve().parents[2] / "bench" / "repo"
    assert main(["eval", "--repo", str(bench), "--variants", "today,bogus"]) != 0
    err = capsys.readouterr().err
    assert "bogus" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["eval", "--repo", str(bench), "--langs", "cobol"]) != 0
    assert "cobol" in capsys.readouterr().err


def test_a_clash_with_the_saved_run_names_the_setting(
    fetched: tuple[Manifest, Path, list[Hole]], tmp_path: Path
) -> None:
    """Resuming into a folder made with other settings says which setting differs: "another service
    settings" alone left the user diffing two JSON files."""
    manifest, cache, holes = fetched
    service = FakeService(targets=_targets(holes))
    run_set(service, service.config, manifest, cache, [("python", holes[0])],
            RepoRunConfig(["today"], peer_after=None, out=tmp_path),
            {"model": "fake", "service": {"prefix_share": 0.75, "threshold": 0.9}})  # fmt: skip
    with pytest.raises(UserError, match=r"prefix_share 0\.75 there") as err:
        run_set(service, service.config, manifest, cache, [("python", holes[0])],
                RepoRunConfig(["today"], peer_after=None, out=tmp_path),
                {"model": "fake", "service": {"prefix_share": 0.9, "threshold": 0.9}})  # fmt: skip
    assert "threshold" not in str(err.value)


def test_repo_service_takes_the_prefix_share_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """--prefix-share reaches the repository run's service (it was silently dropped: every repo pass
    ran at the default share whatever the flag said)."""
    import argparse

    from dspark_lsp.evaluation import repo_cli
    from dspark_lsp.service import CompletionService

    made: list[ServiceConfig] = []
    monkeypatch.setattr(CompletionService, "load", classmethod(lambda cls, cfg: made.append(cfg) or cfg))
    base = {"model": "default", "draft": None, "dtype": "auto", "pack": "auto", "cache_dir": None,
            "max_new_tokens": None}  # fmt: skip
    repo_cli._service(argparse.Namespace(**base, prefix_share=0.6))
    repo_cli._service(argparse.Namespace(**base, prefix_share=None))
    assert made[0].prefix_share == 0.6
    assert made[1].prefix_share == ServiceConfig().prefix_share
