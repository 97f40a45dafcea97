"""Corpus collection, the file-level held-out split, and FIM sample shapes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dspark_lsp.errors import UserError
from dspark_lsp.training.corpus import SourceRoot, collect, is_held_out
from dspark_lsp.training.samples import (
    EOS,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    SampleMaker,
    SampleShape,
    load_tokenizer,
)
from tests.drafts.test_draft_helpers import CODE, tiny_tokenizer


def test_held_out_split_is_by_path_stable_and_about_the_asked_share() -> None:
    keys = [f"root/pkg{i}/mod{j}.py" for i in range(50) for j in range(40)]
    held = [k for k in keys if is_held_out(k, 5.0)]
    assert 0.035 < len(held) / len(keys) < 0.065
    assert held == [k for k in keys if is_held_out(k, 5.0)]  # deterministic: no RNG involved
    assert not any(is_held_out(k, 0.0) for k in keys)


def test_collect_skips_caches_minified_tiny_and_huge_files(tmp_path: Path) -> None:
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.py").write_text(CODE)
    (tmp_path / "lib.min.js").write_text(CODE)
    (tmp_path / "tiny.py").write_text("x = 1\n")
    (tmp_path / "huge.py").write_text("x = 1\n" * 50_000)
    (tmp_path / "notes.txt").write_text(CODE)
    (tmp_path / "good.py").write_text(CODE)
    (tmp_path / "good.ts").write_text(CODE)
    files = collect([SourceRoot("t", tmp_path, "MIT")])
    assert sorted(f.rel for f in files) == ["good.py", "good.ts"]
    with pytest.raises(UserError, match="not a directory"):
        collect([SourceRoot("t", tmp_path / "missing", "MIT")])


def test_fim_samples_have_the_server_prompt_layout(tmp_path: Path) -> None:
    tok = load_tokenizer(tiny_tokenizer(tmp_path))
    maker = SampleMaker(tok, SampleShape(prefix_tokens=40, suffix_tokens=16, middle_tokens=64))
    sp = maker.sp
    rng = random.Random(0)
    for _ in range(30):
        s = maker.fim(rng, CODE)
        t = s.tokens
        assert t[0] == sp[FIM_PREFIX] and t[s.middle_start - 1] == sp[FIM_MIDDLE]
        assert t.count(sp[FIM_SUFFIX]) == 1
        assert t.index(sp[FIM_SUFFIX]) <= 41 and s.middle_start - t.index(sp[FIM_SUFFIX]) - 2 <= 16
        hole = t[s.middle_start :]
        assert 1 <= len(hole) <= 64
        if len(hole) < 64:
            assert hole[-1] == sp[EOS]  # a finished hole ends with EOS
        # Decoding the pieces gives back contiguous text from the file.
        pre = tok.decode(t[1 : t.index(sp[FIM_SUFFIX])])
        mid = tok.decode([x for x in hole if x != sp[EOS]])
        assert (pre + mid) in CODE


def test_a_tokenizer_without_fim_tokens_is_a_user_error(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    plain = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(UserError, match="FIM"):
        SampleMaker(plain, SampleShape())
    with pytest.raises(UserError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "nothing")


def test_other_language_roots_are_permissive_and_skip_generated_headers(tmp_path: Path) -> None:
    from dspark_lsp.training.corpus import C_FAMILY_SUFFIXES, extra_language_roots

    (tmp_path / "good.hpp").write_text(CODE)
    (tmp_path / "good.c").write_text(CODE)
    (tmp_path / "good.py").write_text(CODE)
    assert sorted(f.rel for f in collect([SourceRoot("t", tmp_path, "MIT")], C_FAMILY_SUFFIXES)) == [
        "good.c", "good.hpp"]
    roots = extra_language_roots()
    for r in roots:
        assert r.path.is_dir()
        assert any(name in r.licence for name in ("BSD", "MIT", "PSF", "Apache")), r
        assert "ATen/ops" not in str(r.path)  # generated operator headers stay out
    # Every torch wheel ships its C++ headers: at least those roots exist wherever the tests run.
    assert any(r.name.startswith("torch-include/") for r in roots)


def test_extraction_mix_records_its_other_language_sources(tmp_path: Path) -> None:
    import json

    from dspark_lsp.training.features import _extra_texts

    texts = _extra_texts(tmp_path, 5.0)
    manifest = json.loads((tmp_path / "extra_corpus.json").read_text())
    assert texts and manifest["roots"] and all(r["licence"] for r in manifest["roots"])
    counts = manifest["counts"]
    assert sum(c["train_chars"] for c in counts.values()) == sum(len(t) for t in texts)
    # Held-out files stay out of the returned training texts (the split holds back some of them).
    assert sum(c["held_out_chars"] for c in counts.values()) > 0
