"""Shared fixtures for the draft/training tests: a tiny FIM-capable tokenizer and tiny corpus."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dspark_lsp.training.samples import SPECIAL_TOKENS


def prepared_default_target() -> Path | None:
    """The prepared 0.5B target's directory (real-model tests), or None when it is not prepared: the
    shipped drafts were trained on it and their cards' acceptance is the 0.5B's (the default target is
    the 1.5B since issue 32)."""
    from dspark_lsp.errors import ModelError
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.models.registry import QWEN_05B

    try:
        where = resolve_model(QWEN_05B.name)
    except ModelError:
        return None
    return where if isinstance(where, Path) else None

CODE = '''
def add(a, b):
    """Return the sum of a and b."""
    return a + b


def mul(a, b):
    result = 0
    for _ in range(b):
        result = add(result, a)
    return result


class Counter:
    def __init__(self, start=0):
        self.value = start

    def step(self, by=1):
        self.value = add(self.value, by)
        return self.value
'''


def tiny_tokenizer(tmp: Path) -> Path:
    """A byte-level BPE (a few hundred tokens) with the Qwen FIM specials, saved as tokenizer.json."""
    out = tmp / "tok"
    if (out / "tokenizer.json").is_file():
        return out
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CODE] * 4, trainer)
    out.mkdir()
    tok.save(str(out / "tokenizer.json"))
    return out


def tiny_corpus(tmp: Path, n_files: int = 6) -> Path:
    root = tmp / "corpus"
    root.mkdir(exist_ok=True)
    for i in range(n_files):
        (root / f"mod{i}.py").write_text(CODE.replace("add", f"add{i}") * 3)
    return root
