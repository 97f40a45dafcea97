"""The prompt with other files' context: the repository format, its budget, and no change without it."""

from __future__ import annotations

from typing import Any

import pytest

from dspark_lsp.context.types import ContextFile
from dspark_lsp.models.fim import FimTokens, detect_fim_tokens
from dspark_lsp.prompt import PromptContext, RepoFormat, build_fim_prompt, detect_repo_format

DOC = "import util\n\n\ndef main():\n    total = util.add(1, 2)\n    return total\n"
OFFSET = DOC.index("add(") + 4
FILES = (
    ContextFile("pkg/other.py", "def unrelated():\n    pass\n", "open"),
    ContextFile("pkg/util.py", "def add(a, b):\n    return a + b\n", "definition"),
)


@pytest.fixture(scope="module")
def fim(tiny_tokenizer: Any) -> FimTokens:
    return detect_fim_tokens(tiny_tokenizer)


def encode(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False).input_ids)


def test_no_context_is_todays_prompt(tiny_tokenizer: Any, fim: FimTokens) -> None:
    plain = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context_window=256)
    fmt = detect_repo_format(tiny_tokenizer)
    for ctx in (None, PromptContext((), 512, "main.py", "r", fmt), PromptContext(FILES, 0, "main.py", "r", fmt)):
        fp = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context_window=256, context=ctx)
        assert (fp.ids, fp.text, fp.context_tokens) == (plain.ids, plain.text, 0)
    assert plain.text == f"{fim.prefix}{DOC[:OFFSET]}{fim.suffix}{DOC[OFFSET:]}{fim.middle}"


def test_repository_format(tiny_tokenizer: Any, fim: FimTokens) -> None:
    fmt = detect_repo_format(tiny_tokenizer)
    assert fmt.native
    ctx = PromptContext(FILES, 512, "pkg/main.py", "demo", fmt)
    fp = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context_window=256, context=ctx)
    head = (
        "<|repo_name|>demo\n<|file_sep|>pkg/other.py\ndef unrelated():\n    pass\n"
        "<|file_sep|>pkg/util.py\ndef add(a, b):\n    return a + b\n<|file_sep|>pkg/main.py\n"
    )
    assert fp.text == head + f"{fim.prefix}{DOC[:OFFSET]}{fim.suffix}{DOC[OFFSET:]}{fim.middle}"
    assert encode(tiny_tokenizer, fp.text) == fp.ids  # the text is the exact model input
    assert fp.context_files == FILES
    assert fp.context_tokens == len(encode(tiny_tokenizer, head))


def test_budget_drops_the_least_important_first(tiny_tokenizer: Any, fim: FimTokens) -> None:
    fmt = detect_repo_format(tiny_tokenizer)
    full = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=PromptContext(FILES, 4096, "m.py", "d", fmt))
    for budget in range(1, full.context_tokens + 2):
        fp = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=PromptContext(FILES, budget, "m.py", "d", fmt))
        assert fp.context_tokens <= budget
        assert encode(tiny_tokenizer, fp.text) == fp.ids
        # What survives is a tail of the list (a shortened first piece allowed): the definition, nearest
        # the cursor, is the last to go.
        if fp.context_files:
            assert fp.context_files[-1].path == "pkg/util.py"
    assert full.context_files == FILES


def test_a_big_piece_keeps_its_first_lines(tiny_tokenizer: Any, fim: FimTokens) -> None:
    fmt = detect_repo_format(tiny_tokenizer)
    big = ContextFile("big.py", "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(200)), "open")
    fp = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=PromptContext((big,), 120, "m.py", "d", fmt))
    assert 0 < fp.context_tokens <= 120
    kept = fp.context_files[0].text
    assert big.text.startswith(kept) and kept.endswith("\n") and len(kept) < len(big.text)


def test_plain_fallback_puts_context_in_the_prefix(tiny_tokenizer: Any, fim: FimTokens) -> None:
    ctx = PromptContext(FILES, 512, "pkg/main.py", "demo", RepoFormat(comment="//"))
    fp = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=ctx)
    head = "// pkg/other.py\ndef unrelated():\n    pass\n\n// pkg/util.py\ndef add(a, b):\n    return a + b\n\n"
    assert fp.text == f"{fim.prefix}{head}{DOC[:OFFSET]}{fim.suffix}{DOC[OFFSET:]}{fim.middle}"
    assert fp.prefix == DOC[:OFFSET]  # the document part is unchanged
    assert encode(tiny_tokenizer, fp.text) == fp.ids


def test_spm_keeps_the_prompt_head_while_typing(tiny_tokenizer: Any, fim: FimTokens) -> None:
    """Suffix first: typing one more character changes only the prompt's tail."""
    fmt = detect_repo_format(tiny_tokenizer)
    ctx = PromptContext(FILES, 512, "m.py", "d", fmt)
    typed = DOC[:OFFSET] + "1" + DOC[OFFSET:]
    spm = [build_fim_prompt(t, OFFSET + d, tiny_tokenizer, fim, context=ctx, order="spm") for t, d in ((DOC, 0), (typed, 1))]
    psm = [build_fim_prompt(t, OFFSET + d, tiny_tokenizer, fim, context=ctx, order="psm") for t, d in ((DOC, 0), (typed, 1))]

    def shared(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    assert spm[0].text.endswith(f"{fim.prefix}{fim.suffix}{DOC[OFFSET:]}{fim.middle}{DOC[:OFFSET]}")
    assert encode(tiny_tokenizer, spm[0].text) == spm[0].ids
    assert shared(spm[0].ids, spm[1].ids) >= len(spm[0].ids) - 4
    assert shared(psm[0].ids, psm[1].ids) < len(psm[0].ids) - spm[0].suffix_tokens


def test_spm_heal_backs_off_the_last_prefix_token(tiny_tokenizer: Any, fim: FimTokens) -> None:
    """Token healing: the suffix-first prompt leaves out the prefix's last token, whose text the completion
    must spell again (FimPrompt.heal); psm, or heal off, is the prompt as before."""
    fmt = detect_repo_format(tiny_tokenizer)
    ctx = PromptContext(FILES, 512, "m.py", "d", fmt)
    plain = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=ctx, order="spm")
    healed = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=ctx, order="spm", heal=True)
    last = tiny_tokenizer.decode(encode(tiny_tokenizer, DOC[:OFFSET])[-1:])
    assert healed.heal == last and DOC[:OFFSET].endswith(last) and last
    assert healed.ids == plain.ids[:-1]
    assert healed.text == plain.text[: -len(last)] and healed.prefix == plain.prefix
    assert encode(tiny_tokenizer, healed.text) == healed.ids
    assert healed.prefix_tokens == plain.prefix_tokens - 1 and healed.context_tokens == plain.context_tokens
    psm = build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=ctx, order="psm")
    assert build_fim_prompt(DOC, OFFSET, tiny_tokenizer, fim, context=ctx, order="psm", heal=True) == psm
    # Nothing to back off at the start of a file, and never the whole prefix.
    assert build_fim_prompt(DOC, 0, tiny_tokenizer, fim, order="spm", heal=True).heal == ""
    assert build_fim_prompt(DOC, 1, tiny_tokenizer, fim, order="spm", heal=True).heal == ""


def test_token_table_reads_the_tokenizers_bytes(tiny_tokenizer: Any) -> None:
    """The byte-level reading of the vocabulary agrees with the tokenizer's own decoding of each token."""
    from dspark_lsp.models.token_bytes import token_table

    table = token_table(tiny_tokenizer)
    assert token_table(tiny_tokenizer) is table  # built once per tokenizer
    checked = 0
    for i in range(len(table)):
        text = tiny_tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        piece = table.pieces[i]
        if i in tiny_tokenizer.all_special_ids:
            assert piece is None
        elif "\ufffd" not in text:
            assert piece is not None and piece.decode("utf-8") == text
            checked += 1
    assert checked > 100
    paren = encode(tiny_tokenizer, "(")[0]
    assert paren in table.allowed(b"(").tolist()


def test_the_window_takes_what_the_context_leaves(tiny_tokenizer: Any, fim: FimTokens) -> None:
    """The prompt is contextWindow + contextBudget tokens at most, whatever the context holds: a short
    definition leaves the rest of its budget to the current file's window (at equal prompt length the
    file's own text beats an unused budget), none at all gives the file all of it."""
    fmt = detect_repo_format(tiny_tokenizer)
    long_doc = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(400))
    at = len(long_doc) // 2
    window, budget = 128, 96

    def file_tokens(ctx: PromptContext | None) -> tuple[int, int]:
        fp = build_fim_prompt(long_doc, at, tiny_tokenizer, fim, context_window=window, context=ctx)
        assert len(fp.ids) <= window + budget
        return fp.prefix_tokens + fp.suffix_tokens, fp.context_tokens

    alone, _ = file_tokens(None)
    empty, none_used = file_tokens(PromptContext((), budget, "m.py", "d", fmt))
    short, used = file_tokens(PromptContext(FILES[1:], budget, "m.py", "d", fmt))
    assert none_used == 0 and 0 < used < budget
    assert alone <= window - 3 < short <= empty <= window + budget - 3
    # Whole lines, the start snapped to a 16-line block: a window may stop up to one block short of its
    # budget, never more.
    block = len(encode(tiny_tokenizer, "".join(long_doc.splitlines(keepends=True)[:16])))
    assert empty > window + budget - 3 - block and short > window + budget - used - 3 - block
