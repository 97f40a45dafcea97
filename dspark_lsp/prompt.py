"""The fill-in-the-middle prompt: prefix and suffix around the cursor, within a token budget.

The prefix window starts on a line boundary snapped to a multiple of ``SNAP_LINES`` lines, so while the
user types, consecutive prompts share their whole prefix token for token and the decoder's prefix cache
can skip re-prefilling it (a window that slid one line per keystroke would invalidate it every time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dspark_lsp.models.fim import FimTokens

SNAP_LINES = 16
# How much document text outside the prompt window the n-gram lookup may search, each side.
OUTSIDE_CHARS = 16_000


class _Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


@dataclass
class FimPrompt:
    text: str  # the exact model input as text
    ids: list[int]
    prefix: str  # the document text used before the cursor
    suffix: str  # ... and after it
    prefix_tokens: int
    suffix_tokens: int


def _encode(tokenizer: _Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _lines_keepends(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def build_fim_prompt(
    text: str,
    offset: int,
    tokenizer: _Tokenizer,
    fim: FimTokens,
    *,
    context_window: int = 256,
    prefix_share: float = 0.75,
) -> FimPrompt:
    """Prefix gets ``prefix_share`` of the budget (plus whatever the suffix leaves unused)."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} outside the document (length {len(text)})")
    budget = max(8, context_window - 3)  # three FIM marker tokens
    prefix_text, suffix_text = text[:offset], text[offset:]

    # Suffix: whole lines from the cursor onwards while they fit in their share.
    suffix_budget = int(budget * (1.0 - prefix_share))
    suffix_lines = _lines_keepends(suffix_text)
    suffix_ids: list[int] = []
    used_suffix = ""
    if suffix_lines and suffix_budget > 0:
        # The rest of the cursor's line always goes in (truncated by tokens if it is huge).
        for i, line in enumerate(suffix_lines):
            candidate = _encode(tokenizer, used_suffix + line)
            if len(candidate) > suffix_budget:
                if i == 0:
                    # Keep the head of a huge first line (the text right after the cursor).
                    head = line
                    while head and len(candidate) > suffix_budget:
                        head = head[: max(0, len(head) - max(1, len(head) // 4))]
                        candidate = _encode(tokenizer, head)
                    used_suffix, suffix_ids = head, candidate
                break
            used_suffix += line
            suffix_ids = candidate
    prefix_budget = budget - len(suffix_ids)

    # Prefix: walk back over lines until the budget is spent, then snap the start forward.
    lines = _lines_keepends(prefix_text)
    if prefix_text.endswith(("\n", "\r")) or not lines:
        lines.append("")  # the cursor sits at the start of an (empty) line
    cursor_line = len(lines) - 1
    start = cursor_line
    tokens = len(_encode(tokenizer, lines[cursor_line]))
    while start > 0:
        n = len(_encode(tokenizer, lines[start - 1]))
        if tokens + n > prefix_budget:
            break
        tokens += n
        start -= 1
    if start > 0:
        # Snap forward to a block boundary so the start stays put while the user types; never so far
        # that the lines just before the cursor are lost (then the unsnapped start is used).
        snapped = ((start + SNAP_LINES - 1) // SNAP_LINES) * SNAP_LINES
        if snapped < cursor_line:
            start = snapped
    used_prefix = "".join(lines[start:])
    prefix_ids = _encode(tokenizer, used_prefix)
    while len(prefix_ids) > prefix_budget and used_prefix:
        # A huge line: keep its tail (the text nearest the cursor); ids always re-encode the kept text
        # so the prompt text and its ids stay in step.
        drop = max(1, (len(prefix_ids) - prefix_budget) * len(used_prefix) // (2 * len(prefix_ids)))
        used_prefix = used_prefix[drop:]
        prefix_ids = _encode(tokenizer, used_prefix)

    ids = [fim.prefix_id, *prefix_ids, fim.suffix_id, *suffix_ids, fim.middle_id]
    prompt_text = f"{fim.prefix}{used_prefix}{fim.suffix}{used_suffix}{fim.middle}"
    return FimPrompt(
        text=prompt_text,
        ids=ids,
        prefix=used_prefix,
        suffix=used_suffix,
        prefix_tokens=len(prefix_ids),
        suffix_tokens=len(suffix_ids),
    )


def outside_window_ids(
    text: str, offset: int, prompt: FimPrompt, tokenizer: _Tokenizer, chars: int = OUTSIDE_CHARS
) -> list[int]:
    """Token ids of the document text the prompt window left out, up to ``chars`` each side: code
    repeats itself across a file, so n-gram lookup searches this too (the model never sees it)."""
    start = offset - len(prompt.prefix)
    end = offset + len(prompt.suffix)
    return _encode(tokenizer, text[max(0, start - chars) : start]) + _encode(tokenizer, text[end : end + chars])
