"""build_fim_prompt: token budget, text/ids agreement, a prefix window that stays put while typing, huge
lines."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.models.fim import FimTokens, detect_fim_tokens
from dspark_lsp.prompt import SNAP_LINES, build_fim_prompt, outside_window_ids


@pytest.fixture(scope="module")
def fim(tiny_tokenizer: Any) -> FimTokens:
    return detect_fim_tokens(tiny_tokenizer)


def encode(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False).input_ids)


def check_invariants(tok: Any, fim: FimTokens, text: str, offset: int, window: int, share: float) -> Any:
    fp = build_fim_prompt(text, offset, tok, fim, context_window=window, prefix_share=share)
    assert len(fp.ids) <= window
    # The prompt text is the exact model input: tokenizing it gives the ids.
    assert encode(tok, fp.text) == fp.ids
    assert fp.text == f"{fim.prefix}{fp.prefix}{fim.suffix}{fp.suffix}{fim.middle}"
    assert text[:offset].endswith(fp.prefix)
    assert text[offset:].startswith(fp.suffix)
    assert fp.ids[0] == fim.prefix_id and fp.ids[-1] == fim.middle_id
    assert fp.ids[1 + fp.prefix_tokens] == fim.suffix_id
    assert fp.prefix_tokens == len(encode(tok, fp.prefix))
    assert fp.suffix_tokens == len(encode(tok, fp.suffix))
    return fp


LINE_CHARS = st.sampled_from(
    list("abcxyz_019 ()[]{}:=+-.,'\"#\t") + ["é", "中", "😀", "    ", "def ", "return "]
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, int]:
    lines = draw(st.lists(st.lists(LINE_CHARS, max_size=30).map("".join), min_size=1, max_size=40))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines) + draw(st.sampled_from(["", eol]))
    return text, draw(st.integers(0, len(text)))


@settings(max_examples=60, deadline=None)
@given(doc=documents(), window=st.integers(16, 200), share=st.floats(0.1, 1.0))
def test_budget_and_text_ids_agreement(
    tiny_tokenizer: Any, fim: FimTokens, doc: tuple[str, int], window: int, share: float
) -> None:
    text, offset = doc
    check_invariants(tiny_tokenizer, fim, text, offset, window, share)


def test_small_document_goes_in_whole(tiny_tokenizer: Any, fim: FimTokens) -> None:
    text = "import os\n\ndef add(a, b):\n    return a + b\n\nprint(add(1, 2))\n"
    offset = text.index("a + b")
    fp = check_invariants(tiny_tokenizer, fim, text, offset, 256, 0.75)
    assert fp.prefix == text[:offset] and fp.suffix == text[offset:]


def test_empty_document(tiny_tokenizer: Any, fim: FimTokens) -> None:
    fp = check_invariants(tiny_tokenizer, fim, "", 0, 64, 0.75)
    assert fp.ids == [fim.prefix_id, fim.suffix_id, fim.middle_id]


@pytest.mark.parametrize("offset", [-1, 11])
def test_offset_outside_the_document(tiny_tokenizer: Any, fim: FimTokens, offset: int) -> None:
    with pytest.raises(ValueError):
        build_fim_prompt("0123456789", offset, tiny_tokenizer, fim)


def _numbered_lines(n: int) -> str:
    return "".join(f"x{i} = add(x{i - 1}, {i})\n" for i in range(1, n + 1))


def test_prefix_window_start_is_stable_while_typing_on_one_line(tiny_tokenizer: Any, fim: FimTokens) -> None:
    """Typing on one line: the window keeps its (line-aligned) start, so each prompt's ids extend the
    previous prompt's ids up to the word being typed (what the decoder's prefix cache reuses)."""
    head = _numbered_lines(100)
    tail = "\nprint(result)\n"
    typed = "result = x99"
    prompts = []
    for n in range(len(typed) + 1):
        text = head + typed[:n] + tail
        offset = len(head) + n
        fp = check_invariants(tiny_tokenizer, fim, text, offset, 128, 0.75)
        start = offset - len(fp.prefix)
        assert start == 0 or text[start - 1] == "\n"  # the window starts on a line
        prompts.append((start, fp))
    starts = {s for s, _ in prompts}
    assert len(starts) == 1, f"the window start moved while typing: {sorted(starts)}"
    (start,) = starts
    assert head.count("\n", 0, start) % SNAP_LINES == 0
    assert head.count("\n", 0, start) < 100  # some lines before the cursor are in the window
    for (_, a), (_, b) in zip(prompts, prompts[1:], strict=False):
        stable = a.prefix[: a.prefix.rfind(" ") if " " in a.prefix else 0]  # up to the word being typed
        n = 1 + len(encode(tiny_tokenizer, stable))
        assert b.ids[:n] == a.ids[:n]
        assert b.prefix.startswith(a.prefix)


def test_prefix_keeps_the_lines_before_the_cursor_when_they_fit(tiny_tokenizer: Any, fim: FimTokens) -> None:
    head = _numbered_lines(79)  # the cursor is on line 79; ~14 lines of ~8 tokens fit in 113 tokens
    text = head + "result = \nprint(result)\n"
    offset = len(head) + len("result = ")
    fp = check_invariants(tiny_tokenizer, fim, text, offset, 128, 0.75)
    assert fp.prefix.startswith(("x", "result")) and fp.prefix_tokens > 0
    assert "x79 = add(x78, 79)\n" in fp.prefix  # the line right before the cursor


def test_huge_single_line_keeps_the_text_nearest_the_cursor(tiny_tokenizer: Any, fim: FimTokens) -> None:
    line = "x = [" + ", ".join(str(i) for i in range(6000))
    fp = check_invariants(tiny_tokenizer, fim, line, len(line), 256, 0.75)
    assert fp.prefix.endswith("5998, 5999")
    assert fp.prefix_tokens >= 200  # the budget is used, not thrown away
    # A cursor in the middle of the huge line.
    text = line + "]\nprint(x)\n"
    check_invariants(tiny_tokenizer, fim, text, len(line) // 2, 256, 0.75)


def test_a_long_rest_of_line_is_truncated_not_dropped(tiny_tokenizer: Any, fim: FimTokens) -> None:
    text = "def f(x):\n    return g(" + ", ".join(f"arg{i}" for i in range(60)) + ")\nprint(1)\n"
    offset = text.index("g(") + 2
    fp = check_invariants(tiny_tokenizer, fim, text, offset, 64, 0.75)
    assert fp.suffix.startswith("arg0, arg1")


def test_outside_window_is_the_document_the_prompt_left_out(tiny_tokenizer: Any, fim: FimTokens) -> None:
    text = _numbered_lines(400)
    offset = text.index("x200 =")
    fp = build_fim_prompt(text, offset, tiny_tokenizer, fim, context_window=64)
    start, end = offset - len(fp.prefix), offset + len(fp.suffix)
    assert 0 < start and end < len(text)  # the window leaves text out on both sides
    ids = outside_window_ids(text, offset, fp, tiny_tokenizer, chars=300)
    assert ids == encode(tiny_tokenizer, text[start - 300 : start]) + encode(tiny_tokenizer, text[end : end + 300])
    # Nothing the prompt holds is searched twice; a document that fits the window leaves nothing out.
    small = "def f():\n    return 1\n"
    fp_small = build_fim_prompt(small, 9, tiny_tokenizer, fim, context_window=256)
    assert outside_window_ids(small, 9, fp_small, tiny_tokenizer) == []


@settings(max_examples=40, deadline=None)
@given(doc=documents(), window=st.integers(16, 200), ahead=st.integers(0, 300))
def test_a_look_ahead_prompt_keeps_the_rules_and_starts_no_earlier(
    tiny_tokenizer: Any, fim: FimTokens, doc: tuple[str, int], window: int, ahead: int
) -> None:
    text, offset = doc
    plain = build_fim_prompt(text, offset, tiny_tokenizer, fim, context_window=window, prefix_share=0.9)
    look = build_fim_prompt(text, offset, tiny_tokenizer, fim, context_window=window, prefix_share=0.9,
                            lookahead=ahead)
    assert len(look.ids) <= len(plain.ids) <= window
    assert encode(tiny_tokenizer, look.text) == look.ids
    assert plain.prefix.endswith(look.prefix) and look.suffix == plain.suffix  # its window starts no earlier
    if ahead == 0:
        assert look == plain


def test_the_look_ahead_prompt_is_the_window_after_the_slide(tiny_tokenizer: Any, fim: FimTokens) -> None:
    """Typing on at the end of a long file: the look-ahead prompt's window start is where the plain prompt's
    start jumps to once the prefix outgrows its budget (the slide), and stays the same until then."""
    lines = [f"value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 200)]
    text = "".join(lines)
    build = lambda t, ahead=0: build_fim_prompt(  # noqa: E731
        t, len(t), tiny_tokenizer, fim, context_window=400, prefix_share=0.9, lookahead=ahead)
    start = lambda t, fp: len(t) - len(fp.prefix)  # noqa: E731
    cut = next(n for n in range(40, len(lines)) if build("".join(lines[:n]), 64).prefix != build("".join(lines[:n])).prefix)
    now = "".join(lines[:cut])
    ahead = build(now, 64)
    typed = next(m for m in range(1, 400) if start(now, build(now)) != start(now + text[len(now):][:m], build(now + text[len(now):][:m])))
    slid = now + text[len(now):][:typed]
    assert start(slid, build(slid)) == start(now, ahead)
