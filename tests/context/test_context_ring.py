"""The ring of open documents' chunks: selection, ranking, bounds, eviction, and a stable prompt order."""

from __future__ import annotations

from dspark_lsp.context.gather import ContextSettings, gather_context
from dspark_lsp.context.ring import CHUNK_LINES, ChunkRing, RingLimits, query_text


def block(name: str, n: int = CHUNK_LINES) -> str:
    """``n`` lines that mention ``name`` (one chunk's worth)."""
    return "".join(f"    {name}_value = compute_{name}({name}_item_{i})\n" for i in range(n))


def test_picks_the_chunk_like_the_cursor_text() -> None:
    ring = ChunkRing()
    ring.observe("a.py", block("alpha") + block("beta"), "python")
    ring.observe("b.py", block("gamma"), "python")
    picked = ring.pick(block("beta", 4), max_chars=10_000)
    assert picked[0].path == "a.py" and "beta_value" in picked[0].text
    assert all("gamma" not in p.text for p in picked)  # nothing in common: not picked at all
    assert all("alpha" not in p.text for p in picked)


def test_budget_and_exclusion() -> None:
    ring = ChunkRing()
    text = block("alpha") * 3
    ring.observe("a.py", text, "python")
    ring.observe("cur.py", text, "python")
    one = len(block("alpha"))
    picked = ring.pick(block("alpha", 3), exclude="cur.py", max_chars=2 * one)
    assert len(picked) == 2 and {p.path for p in picked} == {"a.py"}
    assert sum(len(p.text) for p in picked) <= 2 * one
    assert ring.pick(block("alpha", 3), max_chars=one - 1) == []
    assert ring.pick("", max_chars=10_000) == []


def test_edited_and_same_language_chunks_rank_higher() -> None:
    ring = ChunkRing()
    ring.observe("x.ts", block("shared"), "typescript")
    ring.observe("y.py", block("shared"), "python")
    one = len(block("shared"))
    assert ring.pick(block("shared", 3), language="python", max_chars=one)[0].path == "y.py"
    assert ring.pick(block("shared", 3), language="typescript", max_chars=one)[0].path == "x.ts"
    ring.observe("z.py", block("shared") * 2, "python", edited_line=CHUNK_LINES + 1)
    best = ring.pick(block("shared", 3), language="python", max_chars=one)[0]
    assert (best.path, best.text) == ("z.py", block("shared"))
    assert ring._chunks["z.py"][1].edited and not ring._chunks["z.py"][0].edited


def test_order_is_by_file_and_line_not_score() -> None:
    ring = ChunkRing()
    ring.observe("b.py", block("one") + block("two"), "python")
    ring.observe("a.py", block("two"), "python")
    picked = ring.pick(block("two", 2) + block("one", 1), max_chars=100_000)
    assert [(p.path, p.text.split("_")[0].strip()) for p in picked] == [("a.py", "two"), ("b.py", "one"), ("b.py", "two")]


def test_bounds_evict_the_oldest_document() -> None:
    ring = ChunkRing(RingLimits(max_chunks=4, max_chars=10**9, chunks_per_file=3))
    ring.observe("a.py", block("a") * 2, "python")
    ring.observe("b.py", block("b") * 2, "python")
    assert len(ring) == 4
    ring.observe("c.py", block("c"), "python")
    assert ring.paths() == ["b.py", "c.py"] and len(ring) == 3
    ring.observe("b.py", block("b") * 5, "python", edited_line=4 * CHUNK_LINES)  # a file over its own cap
    assert ring.paths() == ["c.py", "b.py"] and len(ring._chunks["b.py"]) == 3
    assert [c.first_line for c in ring._chunks["b.py"]] == [2 * CHUNK_LINES, 3 * CHUNK_LINES, 4 * CHUNK_LINES]
    small = ChunkRing(RingLimits(max_chunks=100, max_chars=len(block("a")) * 2, chunks_per_file=100))
    small.observe("a.py", block("a") * 5, "python", edited_line=0)
    assert small.chars <= len(block("a")) * 2 and small._chunks["a.py"][0].edited


def test_forget_drops_a_closed_document() -> None:
    ring = ChunkRing()
    ring.observe("a.py", block("alpha"), "python")
    ring.forget("a.py")
    assert len(ring) == 0 and ring.pick(block("alpha", 2), max_chars=10_000) == []


def test_query_ignores_the_cursor_line_and_its_block() -> None:
    text = "first line\nsecond line\nthird par"
    assert query_text(text, len(text)) == "first line\nsecond line\n"  # the first block: lines before the cursor
    assert query_text(text, len(text), lines=1) == "second line\n"
    lines = [f"line {i}\n" for i in range(40)]
    for cursor in range(32, 40):  # anywhere in the block of lines 32-47: the same query
        doc = "".join(lines[:cursor]) + "par"
        assert query_text(doc, len(doc), lines=4) == "".join(lines[28:32])
    doc = "".join(lines[:31]) + "par"
    assert query_text(doc, len(doc), lines=4) == "".join(lines[12:16])
    # Typing on the cursor's line leaves the query, so the picked chunks, unchanged.
    ring = ChunkRing()
    ring.observe("a.py", block("alpha") + block("beta"), "python")
    doc = block("beta", 3) + "    x = beta"
    first = gather_context(doc, len(doc), "cur.py", "python", ring=ring, lookup=None, settings=ContextSettings(),
                           budget_tokens=600)
    doc2 = doc + "_val"
    assert first and first == gather_context(doc2, len(doc2), "cur.py", "python", ring=ring, lookup=None,
                                             settings=ContextSettings(), budget_tokens=600)
    off = gather_context(doc, len(doc), "cur.py", "python", ring=ring, lookup=None,
                         settings=ContextSettings(open_files=False, definitions=False), budget_tokens=600)
    assert off == ()


def test_a_huge_document_is_chunked_from_its_head_only() -> None:
    from dspark_lsp.context.ring import MAX_CHARS

    ring = ChunkRing()
    huge = block("alpha") * (MAX_CHARS // len(block("alpha")) + 50) + block("omega")
    ring.observe("huge.log", huge, None)
    assert len(ring) <= RingLimits().chunks_per_file
    assert all("omega" not in c.text for c in ring._chunks["huge.log"])
