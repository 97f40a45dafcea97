"""Token healing: the first generated tokens must spell out bytes the prompt left off.

A prompt that ends inside what the model would have read as one token is new to it: in suffix-first FIM
(the prefix is the prompt's end) a cursor right after ``foo(`` leaves the prompt ending in the token
``(``, where training text had tokenized ``(x`` or ``(self`` as one. The prompt builder backs off the
prompt's last token; the decode then lets through only tokens consistent with its bytes until they are
spelled out (a token that starts with what is left, or one that is a proper prefix of it and leaves the
rest to the next token), and the caller strips those bytes from the text it shows. Decoding stays
lossless: speculation starts after the healed tokens, which are picked by the target alone.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


class TokenTable:
    """Each token id's bytes, sorted so that the tokens starting with given bytes are one contiguous run.
    ``pieces[i]`` None: token i is never allowed while healing (special and added tokens)."""

    CACHED = 256  # allowed-id tensors kept: the bytes left to heal repeat ('(', '.', ' ', '\n', ...)

    def __init__(self, pieces: Sequence[bytes | None]) -> None:
        self.pieces = list(pieces)
        order = sorted((p, i) for i, p in enumerate(self.pieces) if p)
        self._sorted = [p for p, _ in order]
        self._ids = [i for _, i in order]
        self._exact: dict[bytes, list[int]] = {}
        for p, i in order:
            self._exact.setdefault(p, []).append(i)
        self._cache: OrderedDict[bytes, torch.Tensor] = OrderedDict()

    def __len__(self) -> int:
        return len(self.pieces)

    def allowed(self, rest: bytes) -> torch.Tensor:
        """The ids that may come next while ``rest`` is still to be spelled out (never empty for a
        byte-level vocabulary, whose single bytes are tokens)."""
        hit = self._cache.get(rest)
        if hit is not None:
            self._cache.move_to_end(rest)
            return hit
        ids: list[int] = []
        # Tokens that start with all of ``rest``: a contiguous run of the sorted pieces.
        at = bisect.bisect_left(self._sorted, rest)
        while at < len(self._sorted) and self._sorted[at].startswith(rest):
            ids.append(self._ids[at])
            at += 1
        # Tokens that are a proper prefix of it (the next token then spells the remainder).
        for n in range(1, len(rest)):
            ids.extend(self._exact.get(rest[:n], ()))
        out = torch.tensor(sorted(ids), dtype=torch.long)
        self._cache[rest] = out
        while len(self._cache) > self.CACHED:
            self._cache.popitem(last=False)
        return out

    def advance(self, rest: bytes, token: int) -> bytes:
        """What is left to spell after ``token`` (an id ``allowed(rest)`` returned)."""
        piece = self.pieces[token] or b""
        if piece.startswith(rest):
            return b""
        if not rest.startswith(piece) or not piece:
            raise ValueError(f"token {token} is not consistent with the bytes being healed")
        return rest[len(piece):]

    def restrict(self, logits: torch.Tensor, rest: bytes) -> torch.Tensor:
        """``logits`` (one row) with every token that cannot come next while ``rest`` is left set to -inf."""
        ids = self.allowed(rest)
        out = torch.full_like(logits, float("-inf"))
        keep = ids[ids < logits.shape[-1]]
        out[keep] = logits[keep]
        return out

    def left_after(self, rest: bytes, tokens: Sequence[int]) -> bytes:
        """What is left to spell after ``tokens`` were generated from ``rest`` (b"": healed)."""
        for tok in tokens:
            if not rest:
                break
            rest = self.advance(rest, tok)
        return rest


@dataclass(frozen=True)
class Heal:
    """One call's healing: ``rest``, the bytes its first tokens must spell, over ``table``."""

    table: TokenTable
    rest: bytes
