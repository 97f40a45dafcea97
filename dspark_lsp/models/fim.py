"""Fill-in-the-middle special tokens, detected from a tokenizer's vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dspark_lsp.errors import ModelError

# (prefix, suffix, middle) spellings of the FIM markers across code-model families. The prompt is
# always prefix-marker + prefix + suffix-marker + suffix + middle-marker (PSM order).
_FIM_STYLES: tuple[tuple[str, str, str], ...] = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder / StarCoder2
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    ("<PRE>", "<SUF>", "<MID>"),  # CodeLlama
)

# Tokens that end a completion whenever the vocabulary has them (besides the tokenizer's own eos).
_STOP_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|im_end|>",
    "<|repo_name|>",
    "<file_sep>",
    "<|EOT|>",
    "<EOT>",
)


class _Vocab(Protocol):
    """The bits of a (transformers) tokenizer we need; kept structural so tests need no real one."""

    eos_token_id: int | None

    def get_vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class FimTokens:
    prefix: str
    suffix: str
    middle: str
    prefix_id: int
    suffix_id: int
    middle_id: int
    eos_ids: tuple[int, ...]

    def prompt(self, prefix: str, suffix: str) -> str:
        """The FIM prompt text (PSM order) whose completion fills the gap between prefix and suffix."""
        return f"{self.prefix}{prefix}{self.suffix}{suffix}{self.middle}"

    def is_stop(self, token_id: int) -> bool:
        return token_id in self.eos_ids


def detect_fim_tokens(tokenizer: _Vocab) -> FimTokens:
    """The FIM markers and stop ids of ``tokenizer``; ModelError when it has no FIM support."""
    vocab = tokenizer.get_vocab()
    for pre, suf, mid in _FIM_STYLES:
        if pre in vocab and suf in vocab and mid in vocab:
            stops: list[int] = []
            if tokenizer.eos_token_id is not None:
                stops.append(int(tokenizer.eos_token_id))
            stops += [vocab[t] for t in _STOP_TOKENS if t in vocab]
            return FimTokens(
                prefix=pre,
                suffix=suf,
                middle=mid,
                prefix_id=vocab[pre],
                suffix_id=vocab[suf],
                middle_id=vocab[mid],
                eos_ids=tuple(dict.fromkeys(stops)),  # de-duplicated, order kept
            )
    raise ModelError(
        "the model's tokenizer has no fill-in-the-middle tokens (e.g. <|fim_prefix|>); use a code model "
        "trained for FIM such as qwen2.5-coder-0.5b"
    )
