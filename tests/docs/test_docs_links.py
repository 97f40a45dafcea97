"""Issue 34: every document the code and the docs cite lives in the repository, and the README stays the
user's page (short, current figures with their folders, no session-by-session history)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("dspark_lsp", "tests", "editors", "bench", "integrations", "docs", ".ci")
SUFFIXES = {".py", ".md", ".sh", ".mjs", ".ts", ".lua", ".toml", ""}
SKIP_PARTS = {"node_modules", ".venv", "out", "__pycache__", ".vscode-test"}
MARKDOWN = [ROOT / "README.md", ROOT / "editors" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The design brief the project started from is not part of the repository: nothing may send readers to it.
OUTSIDE_DOC = "DESIGN" + ".md"


def _scanned_files() -> list[Path]:
    out = [ROOT / "README.md"]
    for top in SCANNED_DIRS:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and not SKIP_PARTS & set(path.parts):
                if path.stat().st_size < 2_000_000:
                    out.append(path)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)}


def test_nothing_cites_the_design_brief_outside_the_repository() -> None:
    hits = []
    for path in _scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if OUTSIDE_DOC in text:
            hits.append(str(path.relative_to(ROOT)))
    assert hits == []


def test_every_cited_docs_page_exists() -> None:
    missing = set()
    for path in _scanned_files():
        for name in re.findall(r"(?<![/\w.])docs/([A-Za-z_]+\.md)", path.read_text(encoding="utf-8", errors="replace")):
            if not (ROOT / "docs" / name).is_file():
                missing.add(f"{path.relative_to(ROOT)}: docs/{name}")
    assert sorted(missing) == []


def test_every_cited_document_name_exists() -> None:
    # A bare name ("see KERNEL.md", "its MODEL_CARD.md") must be some document the repository has; the
    # dated results under bench/results may name documents of their time.
    have = {path.name for path in ROOT.rglob("*.md") if not SKIP_PARTS & set(path.parts)}
    missing = set()
    for path in _scanned_files():
        if path.is_relative_to(ROOT / "bench" / "results"):
            continue
        for name in re.findall(r"(?<![\w.])([A-Z][A-Z_]*\.md)\b", path.read_text(encoding="utf-8", errors="replace")):
            if name not in have:
                missing.add(f"{path.relative_to(ROOT)}: {name}")
    assert sorted(missing) == []


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert broken == []


def test_readme_is_the_users_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 360
    ordinals = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth"
    history = re.findall(rf"\b(?:{ordinals}) session\b|\bsession \d+|\bsessions \d+", text, re.IGNORECASE)
    assert history == []
    # Every results folder the README quotes exists and says how it was measured.
    folders = set(re.findall(r"bench/results/(\d{4}-\d{2}-\d{2}[\w-]*)/", text))
    assert folders, "the README's figures name no results folder"
    for folder in folders:
        assert (ROOT / "bench" / "results" / folder / "README.md").is_file(), folder
