"""`dspark-lsp eval --repo SET`: the repository-level holes through the service, with and without context.

For each hole the document is the file with the rest of the hole's line deleted and the cursor at the
cut, as while typing; the editor has the files this file takes names from open (``Hole.opens``). Each
variant is one way to spend the prompt (at equal totals where it compares sources):

=========  =========================  ====================================================
variant    current-file window        other files (``contextBudget``)
=========  =========================  ====================================================
today      256                        none: the server's defaults before this set existed
window     1024                       none
+open      768                        256 tokens of open documents' chunks
+defs      768                        256 tokens of imported names' definitions
all        768                        256 tokens of both
=========  =========================  ====================================================

The peer (``llama.cpp``) gets the exact prompt text of the ``all`` variant. Every variant's prefix
cache is emptied before each hole, so latencies are cold (a first request), comparable with the peer's.
The report is rewritten after every hole; a run pointed at an existing report's folder keeps its
records and adds only the (hole, method) pairs it lacks, so variants can be run in several passes; the
peer's prompts are kept there too (``prompts.jsonl.gz``), so the peer can run in a later pass.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.repo_fetch import LANGUAGES, Manifest, Package, package_root
from dspark_lsp.evaluation.repo_report import Record, make_record, markdown, summarise
from dspark_lsp.evaluation.repo_set import Hole, hole_document, load_holes

PEER = "llama.cpp"
REPORT = "report.json"
PROMPTS = "prompts.jsonl.gz"
TABLE = "table.md"


@dataclass(frozen=True)
class Variant:
    window: int  # ServiceConfig.context_window: tokens of the current file
    budget: int = 0  # ServiceConfig.context_budget: tokens of other files
    open_files: bool = False
    definitions: bool = False


VARIANTS: dict[str, Variant] = {
    "today": Variant(256),
    "window": Variant(1024),
    "+open": Variant(768, 256, open_files=True),
    "+defs": Variant(768, 256, definitions=True),
    "all": Variant(768, 256, open_files=True, definitions=True),
}


def parse_list(value: str, known: Sequence[str], what: str) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in known]
    if bad or not items:
        raise UserError(f"{what}: {', '.join(bad) or 'empty'} (choose from {', '.join(known)})")
    return items


def interleave(per_language: dict[str, list[Hole]], limit: int) -> list[tuple[str, Hole]]:
    """The first ``limit`` holes of each language (0 = all), one language after another hole by hole,
    so a run stopped early still covers every language."""
    queues = {lang: holes[:limit] if limit else list(holes) for lang, holes in per_language.items()}
    out: list[tuple[str, Hole]] = []
    for i in range(max((len(q) for q in queues.values()), default=0)):
        out += [(lang, q[i]) for lang, q in queues.items() if i < len(q)]
    return out


class ContextBuilder:
    """Other files' pieces for a hole, as the language server gathers them (``lsp.project``): a ring of
    the hole's open files, and imports resolved over the open documents (the one being typed included)
    and then the package's folder as the workspace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._workspace: Any = None

    def workspace(self) -> Any:
        if self._workspace is None:
            try:
                from dspark_lsp.context.workspace import Workspace
            except ImportError as exc:
                raise UserError(f"the definitions variants need dspark_lsp.context.workspace ({exc})") from exc
            self._workspace = Workspace([self.root])  # indexed on its first lookup
        return self._workspace

    def _open_texts(self, hole: Hole) -> dict[str, str]:
        return {rel: (self.root / rel).read_text(encoding="utf-8", errors="replace") for rel in hole.opens}

    def build(self, hole: Hole, language: str, doc: str, offset: int, variant: Variant) -> tuple[Any, ...]:
        if not (variant.open_files or variant.definitions):
            return ()
        from dspark_lsp.context.gather import ContextSettings, gather_context
        from dspark_lsp.context.ring import ChunkRing

        opened = self._open_texts(hole)
        ring = None
        if variant.open_files:
            ring = ChunkRing()
            for rel in reversed(hole.opens):  # the most-used file last: the most recently touched one
                ring.observe(rel, opened[rel], language)
        lookup = None
        if variant.definitions:
            from dspark_lsp.context.lookup import OpenDocumentsLookup

            docs = {self.root / rel: text for rel, text in opened.items()} | {self.root / hole.file: doc}
            lookup = OpenDocumentsLookup(docs, self.workspace(), [self.root])
        settings = ContextSettings(open_files=variant.open_files, definitions=variant.definitions)
        return gather_context(doc, offset, hole.file, language, ring=ring, lookup=lookup,
                              settings=settings, budget_tokens=variant.budget)  # fmt: skip


def service_config(base: Any, variant: Variant) -> Any:
    return replace(base, context_window=variant.window, context_budget=variant.budget,
                   context_open_files=variant.open_files, context_definitions=variant.definitions)  # fmt: skip


def run_variant(service: Any, base_cfg: Any, pkg: Package, hole: Hole, builder: ContextBuilder,
                name: str, variant: Variant) -> tuple[Record, str]:  # fmt: skip
    """One hole through the service under ``variant``: its record and the exact prompt text."""
    from dspark_lsp.contract import CompletionRequest, as_result

    root = builder.root
    doc, offset = hole_document(hole, root)
    context = builder.build(hole, pkg.language, doc, offset, variant)
    service.update_config(service_config(base_cfg, variant))
    cache = getattr(service, "prefix_cache", None)
    if cache is not None:
        cache.clear()  # cold: each hole is a first request, as the peer's
    req = CompletionRequest(text=doc, offset=offset, language_id=pkg.language, path=str(root / hole.file),
                            doc_key=f"{name}:{hole.id}", context=tuple(context),
                            repo_name=pkg.repo, prompt_path=hole.file)  # fmt: skip
    t0 = time.perf_counter()
    result = as_result(service.complete(req))
    ms = result.stats.latency_ms if result.stats.latency_ms is not None else (time.perf_counter() - t0) * 1000
    rec = make_record(hole.id, pkg.language, name, result.text, hole.target, ms,
                      result.stats.prompt_tokens, len(context))  # fmt: skip
    return rec, result.prompt


@dataclass
class RepoRunConfig:
    variants: list[str]
    peer_after: str | None = "all"  # the variant whose prompt the peer gets (None: no peer)
    out: Path | None = None


def load_previous(out: Path | None, settings: dict[str, Any]) -> list[Record]:
    """The records of an earlier run into the same folder (kept when its model settings match); the
    earlier passes' variants are merged into ``settings`` so the report says what every record ran."""
    if out is None or not (out / REPORT).is_file():
        return []
    try:
        saved = json.loads((out / REPORT).read_text(encoding="utf-8"))
        old = saved["settings"]
        # Settings both passes know must agree (a field added to ServiceConfig meanwhile is not a clash).
        common = set(old["service"]) & set(settings["service"])
        clash = [f"{k} {old['service'][k]!r} there" for k in sorted(common)
                 if old["service"][k] != settings["service"][k]]
        if old["model"] != settings["model"]:
            clash.insert(0, f"model {old['model']!r} there")
        if clash:
            said = ", ".join(clash[:4])
            raise UserError(f"{out / REPORT}: another model or service settings ({said}); use another --out")
        records = [Record(**r) for r in saved["records"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{out / REPORT}: not a repository-set report ({exc})") from exc
    settings["variants"] = {**old.get("variants", {}), **settings.get("variants", {})}
    earlier = old.get("passes", [{"variants": list(old.get("variants", {})), "peer": old.get("peer")}])
    settings["passes"] = [*earlier, *settings.get("passes", [])]
    return records


def _methods(cfg: RepoRunConfig, peer: Any, records: list[Record]) -> list[str]:
    """This pass's methods and those of the records kept from earlier passes, in the table's order."""
    run = {*cfg.variants, *([PEER] if peer is not None and cfg.peer_after else [])}
    present = run | {r.method for r in records}
    return [m for m in (*VARIANTS, PEER) if m in present]


def write_report(out: Path, records: list[Record], settings: dict[str, Any], methods: list[str]) -> dict[str, Any]:
    summary = summarise(records, methods)
    report = {"settings": settings, "methods": methods, "summary": summary,
              "records": [r.to_json() for r in records]}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (REPORT + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(out / REPORT)
    (out / TABLE).write_text(markdown(summary, methods), encoding="utf-8")
    return report


class PromptStore:
    """The exact prompt text of the peer's variant for each hole, kept in the output folder
    (``prompts.jsonl.gz``), so a later pass gives the peer the same prompt without decoding it again."""

    def __init__(self, out: Path | None) -> None:
        self.path = out / PROMPTS if out is not None else None
        self.prompts: dict[tuple[str, str], str] = {}
        if self.path is not None and self.path.is_file():
            try:
                with gzip.open(self.path, "rt", encoding="utf-8") as f:
                    for line in f:
                        row = json.loads(line)
                        self.prompts[(row["hole"], row["method"])] = row["prompt"]
            except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
                raise UserError(f"{self.path}: unreadable ({exc}); delete it to decode the prompts again") from exc

    def get(self, hole: str, method: str) -> str | None:
        return self.prompts.get((hole, method))

    def put(self, hole: str, method: str, prompt: str) -> None:
        self.prompts[(hole, method)] = prompt
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(self.path, "at", encoding="utf-8") as f:  # a gzip member per line: still one file
                f.write(json.dumps({"hole": hole, "method": method, "prompt": prompt}, ensure_ascii=False) + "\n")


def _hole_records(service: Any, base_cfg: Any, pkg: Package, hole: Hole, builder: ContextBuilder,
                  cfg: RepoRunConfig, peer: Any, have: set[tuple[str, str]],
                  prompts: PromptStore) -> Iterator[Record]:  # fmt: skip
    need_peer = peer is not None and cfg.peer_after is not None and (hole.id, PEER) not in have
    for name in cfg.variants:
        keep_prompt = name == cfg.peer_after
        if (hole.id, name) in have and not (keep_prompt and prompts.get(hole.id, name) is None):
            continue
        rec, prompt = run_variant(service, base_cfg, pkg, hole, builder, name, VARIANTS[name])
        if keep_prompt:
            prompts.put(hole.id, name, prompt)
        if (hole.id, name) not in have:
            yield rec
    prompt_for_peer = prompts.get(hole.id, cfg.peer_after) if cfg.peer_after else None
    if need_peer and prompt_for_peer is not None:
        ans = peer.complete(prompt_for_peer)
        yield make_record(hole.id, pkg.language, PEER, ans.text, hole.target, ans.latency_ms, ans.prompt_tokens)


def run_set(service: Any, base_cfg: Any, manifest: Manifest, cache: Path, holes: list[tuple[str, Hole]],
            cfg: RepoRunConfig, settings: dict[str, Any], peer: Any = None,
            log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:  # fmt: skip
    """Every hole under every variant (and the peer); the report (also written to ``cfg.out``)."""
    packages = {p.name: p for p in manifest.packages}
    builders: dict[str, ContextBuilder] = {}
    records = load_previous(cfg.out, settings)
    prompts = PromptStore(cfg.out)
    have = {(r.hole, r.method) for r in records}
    methods = _methods(cfg, peer, records)
    t_loop = time.perf_counter()
    for i, (_lang, hole) in enumerate(holes, 1):
        pkg = packages.get(hole.package)
        if pkg is None:
            raise UserError(f"{hole.id}: package {hole.package} is not in the manifest")
        if pkg.name not in builders:
            builders[pkg.name] = ContextBuilder(package_root(pkg, cache))
        new = list(_hole_records(service, base_cfg, pkg, hole, builders[pkg.name], cfg, peer, have, prompts))
        records += new
        have |= {(r.hole, r.method) for r in new}
        if cfg.out is not None:
            write_report(cfg.out, records, settings, methods)
        eta = (time.perf_counter() - t_loop) / i * (len(holes) - i) / 60
        log(f"[{i}/{len(holes)}] {hole.id}: " + " ".join(f"{r.method} {'=' if r.em else '~'}{r.es:.2f}" for r in new)
            + f" (ETA {eta:.1f} min)")  # fmt: skip
    summary = summarise(records, methods)
    return {"settings": settings, "methods": methods, "summary": summary, "records": [r.to_json() for r in records]}


def load_set(set_dir: Path, languages: list[str]) -> dict[str, list[Hole]]:
    return {lang: load_holes(set_dir, lang) for lang in languages}


def settings_of(service: Any, args: Any, cfg: RepoRunConfig, peer_why: str | None) -> dict[str, Any]:
    service_cfg = {k: v for k, v in asdict(service.config).items() if k not in ("SETTINGS", "backend")}
    for k in ("context_window", "context_budget", "context_open_files", "context_definitions"):
        service_cfg.pop(k, None)  # per variant
    return {"model": getattr(service, "description", ""), "service": service_cfg, "set": str(args.repo),
            "variants": {v: asdict(VARIANTS[v]) for v in cfg.variants}, "threads": args.threads,
            "passes": [{"variants": cfg.variants, "peer": PEER if peer_why is None else f"skipped: {peer_why}",
                        "peer_prompt": cfg.peer_after, "started": time.strftime("%Y-%m-%d %H:%M:%S")}],
            "cold": True}  # fmt: skip


def log_line(message: str) -> None:
    print(f"dspark-lsp eval --repo: {message}", file=sys.stderr, flush=True)


__all__ = ["LANGUAGES", "VARIANTS", "RepoRunConfig", "run_set"]
