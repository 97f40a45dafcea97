"""Training samples shaped like the server's requests: FIM prompts (prefix / suffix around a hole, then
the hole's text) and plain left-to-right code, as target-tokenizer ids."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from dspark_lsp.errors import UserError

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
EOS = "<|endoftext|>"
# Always kept in the draft vocabulary (whether or not the corpus uses them).
SPECIAL_TOKENS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, EOS, "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>")
REQUIRED_SPECIALS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, EOS)


@dataclass
class SampleShape:
    prefix_tokens: int = 192  # the server's default: contextWindow 256 x prefixShare 0.75
    suffix_tokens: int = 64
    middle_tokens: int = 64
    plain_tokens: int = 320
    fim_rate: float = 0.8


MIN_SAMPLE_TOKENS = 8  # shorter samples (a tiny file's window) teach the feature draft nothing


@dataclass
class Sample:
    tokens: list[int]  # target ids
    middle_start: int  # index of the first token after <|fim_middle|> (0 for plain code)


def load_tokenizer(path: str | Path) -> Tokenizer:
    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise UserError(f"no tokenizer.json at {p}: prepare the target model first or pass --tokenizer")
    return Tokenizer.from_file(str(file))


def special_ids(tok: Tokenizer) -> dict[str, int]:
    ids: dict[str, int] = {}
    for name in SPECIAL_TOKENS:
        tid = tok.token_to_id(name)
        if tid is not None:
            ids[name] = tid
    missing = [n for n in REQUIRED_SPECIALS if n not in ids]
    if missing:
        raise UserError(f"the tokenizer lacks the FIM tokens {missing}: it is not a FIM-capable tokenizer")
    return ids


class SampleMaker:
    def __init__(self, tok: Tokenizer, shape: SampleShape) -> None:
        self.tok, self.shape = tok, shape
        self.sp = special_ids(tok)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def plain(self, rng: random.Random, text: str) -> Sample:
        # ~4 chars per token for code: cut a character window a little larger than needed.
        width = self.shape.plain_tokens * 5
        start = rng.randrange(max(1, len(text) - width // 2))
        start = text.rfind("\n", 0, start) + 1  # begin at a line start, as files do
        return Sample(self.encode(text[start : start + width])[: self.shape.plain_tokens], 0)

    def fim(self, rng: random.Random, text: str) -> Sample:
        s = self.shape
        cursor = rng.randrange(len(text))
        # The hole runs to the end of the cursor's line, sometimes a few lines more (multi-line).
        extra_lines = rng.choices([0, 1, 2, 4], weights=[6, 2, 1, 1])[0]
        end = cursor
        for _ in range(extra_lines + 1):
            nl = text.find("\n", end)
            end = len(text) if nl < 0 else nl + 1
        prefix = self.encode(text[max(0, cursor - s.prefix_tokens * 6) : cursor])[-s.prefix_tokens :]
        suffix_budget = 0 if rng.random() < 0.1 else rng.randint(s.suffix_tokens // 4, s.suffix_tokens)
        suffix = self.encode(text[end : end + suffix_budget * 6])[:suffix_budget]
        middle = self.encode(text[cursor:end])
        if len(middle) < s.middle_tokens:
            middle.append(self.sp[EOS])  # a finished hole ends with EOS, as the target's FIM does
        middle = middle[: s.middle_tokens]
        head = [self.sp[FIM_PREFIX], *prefix, self.sp[FIM_SUFFIX], *suffix, self.sp[FIM_MIDDLE]]
        return Sample(head + middle, len(head))

    def make(self, rng: random.Random, text: str) -> Sample:
        return self.fim(rng, text) if rng.random() < self.shape.fim_rate else self.plain(rng, text)
