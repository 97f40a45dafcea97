"""Each token's bytes, for token healing (engine.healing.TokenTable), built once per tokenizer.

Byte-level BPE vocabularies (GPT-2's scheme, which Qwen2's uses) store a token as a string in which every
byte is one printable character: the bytes 33-126, 161-172 and 174-255 stand for themselves and the other
68 (controls, space, 127-160, 173) are shifted to the characters from U+0100 on, in byte order. Reading
that mapping back gives a token's exact bytes, half characters included. A vocabulary that does not look
like that falls back to decoding each token alone (tokens that are part of a character are then left
out).
"""

from __future__ import annotations

import weakref
from typing import Any

from dspark_lsp.engine.healing import TokenTable

_TABLES: weakref.WeakKeyDictionary[Any, TokenTable] = weakref.WeakKeyDictionary()


def _byte_of_char() -> dict[str, int]:
    """The inverse of the byte-level alphabet: character -> the byte it stands for."""
    direct = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {chr(b): b for b in direct}
    shifted = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_BYTE_OF = _byte_of_char()


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i in added)
    return ids


def _byte_level(vocab: dict[str, int], size: int, special: set[int]) -> list[bytes | None] | None:
    pieces: list[bytes | None] = [None] * size
    for text, i in vocab.items():
        if i in special or not 0 <= i < size:
            continue
        try:
            pieces[i] = bytes(_BYTE_OF[c] for c in text)
        except KeyError:
            return None  # a character outside the byte alphabet: not a byte-level vocabulary
    return pieces


def token_table(tokenizer: Any) -> TokenTable:
    """The tokenizer's TokenTable (cached while the tokenizer lives)."""
    try:
        hit = _TABLES.get(tokenizer)
    except TypeError:  # not weakly referenceable: build every time
        hit = None
    if hit is not None:
        return hit
    vocab: dict[str, int] = dict(tokenizer.get_vocab())
    size = max(vocab.values()) + 1 if vocab else 0
    special = _special_ids(tokenizer)
    pieces = _byte_level(vocab, size, special)
    if pieces is None or not _agrees(tokenizer, pieces):
        pieces = [None] * size
        for i in range(size):
            if i in special:
                continue
            text = str(tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False))
            if text and "\ufffd" not in text:
                pieces[i] = text.encode("utf-8")
    table = TokenTable(pieces)
    try:
        _TABLES[tokenizer] = table
    except TypeError:
        pass
    return table


def _agrees(tokenizer: Any, pieces: list[bytes | None]) -> bool:
    """Whether the byte reading matches the tokenizer's own decoding on a sample of the vocabulary
    (a vocabulary of printable characters that is not byte-level would read as bytes and be wrong)."""
    sample = [i for i in range(0, len(pieces), max(1, len(pieces) // 64)) if pieces[i]]
    for i in sample:
        text = str(tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False))
        piece = pieces[i] or b""
        if "\ufffd" not in text and piece.decode("utf-8", "replace") != text:
            return False
    return True
