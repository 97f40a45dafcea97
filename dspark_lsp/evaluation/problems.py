"""The holes the eval completes: the bench's own loaders (same seeded choice), seen as an editor sees them.

A HumanEval hole of whole lines is an empty line the cursor sits on (the bench keeps that line break in
the document), so the text that recreates the original file is the canonical solution without its last
line break: that is the ``reference`` a completion is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dspark_lsp.bench.prompts import HUMANEVAL_FILES, BenchPrompt, corpus_prompts, humaneval_prompts
from dspark_lsp.errors import UserError

ALL = 1_000_000  # "--limit 0": every problem of a set


@dataclass(frozen=True)
class Problem:
    id: str
    set: str  # "humaneval-single", "humaneval-multi", "humaneval-span" or "corpus"
    language: str
    text: str  # the document with the hole removed
    offset: int  # the cursor, code points into text
    reference: str  # what, inserted at offset, gives back the original file
    path: str | None = None
    test: str | None = None  # HumanEval's check code (pass@1 only where this exists)
    entry_point: str | None = None

    @property
    def has_tests(self) -> bool:
        return bool(self.test and self.entry_point)


def from_bench(bp: BenchPrompt) -> Problem:
    reference = bp.reference or ""
    before = bp.text[: bp.offset]
    if bp.source.startswith("humaneval-") and reference.endswith("\n") and before.endswith("\n"):
        reference = reference[:-1]  # the document already holds the hole's last line break
    return Problem(
        id=bp.id,
        set=bp.source,
        language=bp.language or "plain",
        text=bp.text,
        offset=bp.offset,
        reference=reference,
        path=bp.path,
        test=bp.test,
        entry_point=bp.entry_point,
    )


def parse_sets(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if s not in HUMANEVAL_FILES]
    if unknown:
        raise UserError(f"unknown HumanEval set(s) {', '.join(unknown)}; use {', '.join(HUMANEVAL_FILES)}")
    return names


def load_problems(
    humaneval_dir: Path | None, sets: list[str], corpus: Path | None, limit: int, seed: int
) -> list[Problem]:
    """``limit`` problems per HumanEval set and per corpus language (0 = all), seeded."""
    if limit < 0:
        raise UserError(f"--limit must be >= 0 (0 = all), got {limit}")
    n = limit or ALL
    out: list[Problem] = []
    if humaneval_dir is not None and sets:
        missing = [HUMANEVAL_FILES[s] for s in sets if not (humaneval_dir / HUMANEVAL_FILES[s]).is_file()]
        if missing:
            raise UserError(f"{humaneval_dir}: missing {', '.join(missing)}")
        try:
            out += [from_bench(bp) for bp in humaneval_prompts(humaneval_dir, sets, n, seed)]
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"{humaneval_dir}: cannot read the HumanEval infilling data ({exc})") from exc
    if corpus is not None:
        if not corpus.is_dir():
            raise UserError(f"--corpus {corpus}: not a directory")
        # The corpus loader tries 20 files per hole wanted: "all" means a fixed, generous number here.
        out += [from_bench(bp) for bp in corpus_prompts(corpus, limit or 50, seed)]
    return out
