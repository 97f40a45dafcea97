"""The fill-in-the-middle prompt: other files' context, then prefix and suffix around the cursor.

The prefix window starts on a line boundary snapped to a multiple of ``SNAP_LINES`` lines, so while the
user types, consecutive prompts share their whole prefix token for token and the decoder's prefix cache
can skip re-prefilling it (a window that slid one line per keystroke would invalidate it every time).

Context from other files (``dspark_lsp.context``) goes first, in Qwen2.5-Coder's repository format when
the vocabulary has its markers::

    <|repo_name|>name\n<|file_sep|>other/path\n<text>\n ... <|file_sep|>this/path\n<FIM part>

and as comment-headed text before the prefix otherwise. First, because it changes least while the user
types: everything up to the cursor then stays token-for-token the same and its KV is reused. With no
context the prompt is exactly the plain FIM prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from dspark_lsp.context.types import ContextFile
from dspark_lsp.models.fim import FimTokens

SNAP_LINES = 16
# How much document text outside the prompt window the n-gram lookup may search, each side.
OUTSIDE_CHARS = 16_000


Order = Literal["psm", "spm"]
# Token healing backs off at most this many tokens, beyond the first only while they spell one word
# (an optional leading punctuation mark, then letters, digits or underscores), as a tokenizer's
# pre-split would keep them together.
HEAL_TOKENS = 3
_WORD_PIECE = re.compile(r"[^\w\s]?\w+")


class _Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ..., clean_up_tokenization_spaces: bool = ...) -> str: ...


class _Vocab(Protocol):
    def get_vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class RepoFormat:
    """The repository-level markers of a vocabulary (Qwen2.5-Coder's), or the plain fallback."""

    repo_name: str = ""
    repo_name_id: int | None = None
    file_sep: str = ""
    file_sep_id: int | None = None
    comment: str = "#"  # the plain fallback's path header: a line comment of the document's language

    @property
    def native(self) -> bool:
        return self.repo_name_id is not None and self.file_sep_id is not None


def detect_repo_format(tokenizer: _Vocab) -> RepoFormat:
    vocab = tokenizer.get_vocab()
    if "<|repo_name|>" in vocab and "<|file_sep|>" in vocab:
        return RepoFormat("<|repo_name|>", vocab["<|repo_name|>"], "<|file_sep|>", vocab["<|file_sep|>"])
    return RepoFormat()


@dataclass(frozen=True)
class PromptContext:
    """What goes before the FIM part: other files' pieces (least important first), within
    ``budget`` tokens; the current file's name in the prompt; the repository's name."""

    files: Sequence[ContextFile] = ()
    budget: int = 0
    path: str = ""
    repo_name: str = ""
    format: RepoFormat = field(default_factory=RepoFormat)


@dataclass
class FimPrompt:
    text: str  # the exact model input as text
    ids: list[int]
    prefix: str  # the document text used before the cursor
    suffix: str  # ... and after it
    prefix_tokens: int
    suffix_tokens: int
    context_tokens: int = 0  # tokens before the FIM part (repository header and other files)
    context_files: tuple[ContextFile, ...] = ()  # the pieces that made it into the prompt
    # Text at the end of ``prefix`` left out of the prompt (its last token or word, backed off): the first
    # generated tokens must spell it out, and it is not part of the completion (engine.healing).
    heal: str = ""


def text_after_heal(text: str, heal: str) -> str:
    """Decoded output less the healed text it starts with (``FimPrompt.heal``, already in the document):
    what the completion adds at the cursor; nothing while the healed text is not all spelled out."""
    if not heal:
        return text
    return text[len(heal):] if text.startswith(heal) else ""


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
    context: PromptContext | None = None,
    order: Order = "psm",
    lookahead: int = 0,
    heal: bool = False,
) -> FimPrompt:
    """Prefix gets ``prefix_share`` of the ``context_window`` budget (plus whatever the suffix leaves
    unused); ``context`` adds up to its own budget of other files' tokens before them. ``order``: the
    FIM arrangement, prefix-suffix-middle or suffix-prefix-middle.

    ``lookahead``: build the prompt with that many fewer prefix tokens, i.e. with the window start the
    prompt will have once the user has typed about that many more tokens here. Where it differs from the
    plain prompt's start, the window is about to slide (every token after the context then changes), and
    a background prefill of this prompt is what the request after the slide will reuse.

    ``heal``: suffix first, back off the prefix's last token or word (``FimPrompt.heal``, engine.healing)."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} outside the document (length {len(text)})")
    head_text, head_ids, files = _context_part(context, tokenizer) if context is not None else ("", [], ())
    # The file's window also gets what the other files leave of their budget: at equal prompt length the
    # current file's own text is worth more than nothing (measured: a short definition beside a 768-token
    # window lost holes a 1,024-token window got right). The prompt then stays contextWindow +
    # contextBudget tokens whatever the context holds; its window start moves only when the context does,
    # which already invalidates every cached token after it.
    spare = max(0, context.budget - len(head_ids)) if context is not None else 0
    budget = max(8, context_window + spare - 3)  # three FIM marker tokens
    prefix_text, suffix_text = text[:offset], text[offset:]
    used_suffix, suffix_ids = _suffix_part(suffix_text, tokenizer, int(budget * (1.0 - prefix_share)))
    prefix_budget = budget - len(suffix_ids)
    # At most half the prefix: a look-ahead is for the next slide, never a window of a few lines.
    prefix_budget -= min(max(0, lookahead), prefix_budget // 2)
    used_prefix, prefix_ids = _prefix_part(prefix_text, tokenizer, prefix_budget)
    if context is not None and not context.format.native and head_text:
        # The plain fallback: the context is text before the prefix, inside the FIM part.
        fim_prefix_text, fim_prefix_ids = head_text + used_prefix, head_ids + prefix_ids
        head_text, head_ids = "", []
    else:
        fim_prefix_text, fim_prefix_ids = used_prefix, prefix_ids
    healed, backed = _heal_part(tokenizer, used_prefix, prefix_ids) if heal and order == "spm" else ("", 0)
    if healed:
        fim_prefix_text, fim_prefix_ids = fim_prefix_text[: -len(healed)], fim_prefix_ids[:-backed]
    ids, body = _arrange(order, fim, head_ids, (fim_prefix_text, fim_prefix_ids), (used_suffix, suffix_ids))
    return FimPrompt(
        text=head_text + body,
        ids=ids,
        prefix=used_prefix,
        suffix=used_suffix,
        prefix_tokens=len(prefix_ids) - backed,
        suffix_tokens=len(suffix_ids),
        context_tokens=len(ids) - len(prefix_ids) + backed - len(suffix_ids) - 3,
        context_files=files,
        heal=healed,
    )


def _arrange(order: Order, fim: FimTokens, head_ids: list[int], prefix: tuple[str, list[int]],
             suffix: tuple[str, list[int]]) -> tuple[list[int], str]:
    """The FIM part's ids (after the context's ``head_ids``) and text, in ``order``."""
    (p_text, p_ids), (s_text, s_ids) = prefix, suffix
    if order == "spm":
        # The FIM paper's suffix-first form (the middle continues the prefix); the bare swap <suf>s<pre>p<mid>
        # is not what the model learned: pass@1 0.07 vs 0.38 (bench/results/2026-12-06-fim-order/).
        ids = [*head_ids, fim.prefix_id, fim.suffix_id, *s_ids, fim.middle_id, *p_ids]
        return ids, f"{fim.prefix}{fim.suffix}{s_text}{fim.middle}{p_text}"
    ids = [*head_ids, fim.prefix_id, *p_ids, fim.suffix_id, *s_ids, fim.middle_id]
    return ids, f"{fim.prefix}{p_text}{fim.suffix}{s_text}{fim.middle}"


def _heal_part(tokenizer: _Tokenizer, prefix: str, prefix_ids: list[int]) -> tuple[str, int]:
    """The text of the prefix's last tokens to back off: the last one, and more while they are pieces of
    one word (``.j`` + ``o``: the model knows ``.join``, not ``.jo``; at most ``HEAL_TOKENS``). Whole
    characters only (a token holding part of one would leave half a character in the prompt), and never
    the whole prefix. Returns the text and how many tokens it was."""
    healed, count = "", 0
    for n in range(1, min(HEAL_TOKENS, len(prefix_ids) - 1) + 1):
        text = str(tokenizer.decode(prefix_ids[-n:], skip_special_tokens=False, clean_up_tokenization_spaces=False))
        if not text or "\ufffd" in text or not prefix.endswith(text) or len(text) >= len(prefix):
            break
        if n > 1 and not _WORD_PIECE.fullmatch(text):
            break
        healed, count = text, n
    return healed, count


def _suffix_part(suffix_text: str, tokenizer: _Tokenizer, suffix_budget: int) -> tuple[str, list[int]]:
    """Whole lines from the cursor onwards while they fit in their share."""
    suffix_lines = _lines_keepends(suffix_text)
    suffix_ids: list[int] = []
    used_suffix = ""
    if not suffix_lines or suffix_budget <= 0:
        return used_suffix, suffix_ids
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
    return used_suffix, suffix_ids


def _prefix_part(prefix_text: str, tokenizer: _Tokenizer, prefix_budget: int) -> tuple[str, list[int]]:
    """Walk back over lines until the budget is spent, then snap the start forward."""
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
    return used_prefix, prefix_ids


def _context_part(ctx: PromptContext, tokenizer: _Tokenizer) -> tuple[str, list[int], tuple[ContextFile, ...]]:
    """The text and ids before the FIM part, and the pieces that fit ``ctx.budget`` tokens.

    Pieces are dropped from the front (the least important) until the rest fits; a last piece too big on
    its own keeps its first lines. Nothing at all (not even the repository header) when none fit, so a
    prompt without context is exactly the plain FIM prompt."""
    fmt = ctx.format
    pieces = [(f, _piece(fmt, f.path, f.text)) for f in ctx.files if f.text.strip()]
    if not pieces or ctx.budget <= 0:
        return "", [], ()
    encoded = [(f, t, _encode_piece(fmt, t, tokenizer)) for f, t in pieces]
    header_text, header_ids = _header(ctx, tokenizer)
    lead_text, lead_ids = _repo_line(ctx, tokenizer) if fmt.native else ("", [])
    room = ctx.budget - len(header_ids) - len(lead_ids)
    while encoded and sum(len(ids) for _, _, ids in encoded) > room:
        if len(encoded) == 1:
            f, t, ids = encoded[0]
            encoded = [e for e in [_shorten(fmt, f, room, tokenizer)] if e[2]] if room > 8 else []
            break
        encoded.pop(0)
    if not encoded:
        return "", [], ()
    text = lead_text + "".join(t for _, t, _ in encoded) + header_text
    ids = lead_ids + [i for _, _, piece_ids in encoded for i in piece_ids] + header_ids
    return text, ids, tuple(f for f, _, _ in encoded)


def _piece(fmt: RepoFormat, path: str, text: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    if fmt.native:
        return f"{fmt.file_sep}{path}\n{body}"
    return f"{fmt.comment} {path}\n{body}\n"


def _encode_piece(fmt: RepoFormat, piece: str, tokenizer: _Tokenizer) -> list[int]:
    """A piece's ids, the separator marker as its special id (never tokenized as text)."""
    if fmt.native and fmt.file_sep_id is not None:
        return [fmt.file_sep_id, *_encode(tokenizer, piece[len(fmt.file_sep) :])]
    return _encode(tokenizer, piece)


def _shorten(fmt: RepoFormat, f: ContextFile, room: int, tokenizer: _Tokenizer) -> tuple[ContextFile, str, list[int]]:
    lines = f.text.splitlines(keepends=True)
    while lines:
        cut = ContextFile(f.path, "".join(lines), f.source)
        piece = _piece(fmt, cut.path, cut.text)
        ids = _encode_piece(fmt, piece, tokenizer)
        if len(ids) <= room:
            return cut, piece, ids
        lines = lines[: max(0, min(len(lines) - 1, len(lines) * room // max(1, len(ids))))]
    return ContextFile(f.path, "", f.source), "", []


def _header(ctx: PromptContext, tokenizer: _Tokenizer) -> tuple[str, list[int]]:
    """The current file's own separator line, after the other files (native format only)."""
    fmt = ctx.format
    if not fmt.native or fmt.file_sep_id is None:
        return "", []
    line = f"{ctx.path or 'untitled'}\n"
    return fmt.file_sep + line, [fmt.file_sep_id, *_encode(tokenizer, line)]


def _repo_line(ctx: PromptContext, tokenizer: _Tokenizer) -> tuple[str, list[int]]:
    fmt = ctx.format
    assert fmt.repo_name_id is not None
    line = f"{ctx.repo_name or 'workspace'}\n"
    return fmt.repo_name + line, [fmt.repo_name_id, *_encode(tokenizer, line)]


def outside_window_ids(
    text: str, offset: int, prompt: FimPrompt, tokenizer: _Tokenizer, chars: int = OUTSIDE_CHARS
) -> list[int]:
    """Token ids of the document text the prompt window left out, up to ``chars`` each side: code
    repeats itself across a file, so n-gram lookup searches this too (the model never sees it)."""
    start = offset - len(prompt.prefix)
    end = offset + len(prompt.suffix)
    return _encode(tokenizer, text[max(0, start - chars) : start]) + _encode(tokenizer, text[end : end + chars])
