"""Benchmark prompts: HumanEval infilling problems and FIM holes cut from source files."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

from dspark_lsp.errors import UserError

HUMANEVAL_FILES = {
    "single": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi": "HumanEval-MultiLineInfilling.jsonl.gz",
    "span": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}

CODE_EXTENSIONS = {".py", ".js", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h", ".cpp", ".cc", ".hpp"}


@dataclass
class BenchPrompt:
    id: str
    source: str  # "humaneval-single", "corpus", ...
    text: str  # the document with the hole removed
    offset: int  # cursor (code points)
    path: str | None = None
    language: str | None = None
    reference: str | None = None  # the removed text
    test: str | None = None  # HumanEval check code
    entry_point: str | None = None


def find_humaneval_dir(explicit: str | None) -> Path | None:
    if explicit and explicit not in ("auto", "none"):
        p = Path(explicit)
        return p if p.is_dir() else None
    if explicit == "none":
        return None
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *here.parents]:
        cand = base.parent / "shared" / "data" / "humaneval-infilling"
        if cand.is_dir():
            return cand
    return None


def humaneval_prompts(directory: Path, sets: list[str], limit: int, seed: int) -> list[BenchPrompt]:
    out: list[BenchPrompt] = []
    for name in sets:
        fname = HUMANEVAL_FILES.get(name)
        if fname is None:
            raise UserError(f"unknown HumanEval set {name!r}; use {', '.join(HUMANEVAL_FILES)}")
        with gzip.open(directory / fname, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        rng = random.Random(f"{seed}-{name}")
        rng.shuffle(rows)
        for row in rows[:limit]:
            # A hole of whole lines is, in an editor, an empty line the cursor sits on: keep that line
            # break in the document so a completion that ends at its line's end stays a valid program.
            whole_lines = row["prompt"].endswith("\n") and row["canonical_solution"].endswith("\n")
            out.append(
                BenchPrompt(
                    id=row["task_id"],
                    source=f"humaneval-{name}",
                    text=row["prompt"] + ("\n" if whole_lines else "") + row["suffix"],
                    offset=len(row["prompt"]),
                    path="problem.py",
                    language="python",
                    reference=row["canonical_solution"],
                    test=row["test"],
                    entry_point=row["entry_point"],
                )
            )
    return out


def corpus_prompts(directory: Path, limit: int, seed: int) -> list[BenchPrompt]:
    """``limit`` holes per language (by file extension) at random line/column positions.

    A hole is the rest of a line from a random column, or the next 1–3 whole lines.
    """
    files = sorted(
        p for p in directory.rglob("*") if p.is_file() and p.suffix in CODE_EXTENSIONS and p.stat().st_size < 400_000
    )
    if not files:
        raise UserError(f"no source files ({', '.join(sorted(CODE_EXTENSIONS))}) under {directory}")
    from dspark_lsp.syntax import detect_language

    by_ext: dict[str, list[Path]] = {}
    for f in files:
        by_ext.setdefault(detect_language(str(f), None) or f.suffix, []).append(f)
    out: list[BenchPrompt] = []
    for lang in sorted(by_ext):
        rng = random.Random(f"{seed}-{lang}")
        group = by_ext[lang]
        made, attempts = 0, 0
        while made < limit and attempts < limit * 20:
            attempts += 1
            prompt = _cut_hole(rng, rng.choice(group), lang)
            if prompt is not None:
                out.append(prompt)
                made += 1
    return out


def _cut_hole(rng: random.Random, path: Path, language: str) -> BenchPrompt | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    lines = text.splitlines(keepends=True)
    candidates = [i for i, line in enumerate(lines) if len(line.strip()) > 8]
    if len(candidates) < 5:
        return None
    li = rng.choice(candidates)
    line = lines[li]
    indent = len(line) - len(line.lstrip())
    start = sum(len(x) for x in lines[:li])
    if rng.random() < 0.5:
        body = line.rstrip("\r\n")
        col = rng.randint(indent, max(indent, len(body) - 1))
        cut_start, cut_end = start + col, start + len(body)
    else:
        n = rng.randint(1, 3)
        cut_start = start + indent
        cut_end = start + sum(len(x) for x in lines[li : li + n]) - 1
    reference = text[cut_start:cut_end]
    if not reference.strip():
        return None
    return BenchPrompt(
        id=f"{path.name}:{li}",
        source="corpus",
        text=text[:cut_start] + text[cut_end:],
        offset=cut_start,
        path=str(path),
        language=language,
        reference=reference,
    )
