"""Language registry: grammar folders, detection, bad grammar data, and the step-cost target."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.errors import UserError
from dspark_lsp.syntax import Scope, SyntaxDocument, available_languages, detect_language, languages
from dspark_lsp.syntax.bench import measure_step_cost

REQUIRED = {"python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp"}


def test_required_languages_available_and_queries_compile() -> None:
    assert REQUIRED <= set(available_languages())
    for name in REQUIRED:
        loaded = languages.load_language(name)
        assert loaded is not None
        assert loaded.context_query.pattern_count > 0
    assert {"def", "return", "class"} <= languages.load_language("python").keywords  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "language_id", "want"),
    [
        ("/a/b.py", None, "python"),
        ("file:///x/App.TSX", None, "tsx"),
        ("main.rs", None, "rust"),
        ("x.hpp", None, "cpp"),
        ("x.h", None, "c"),
        (None, "typescriptreact", "tsx"),
        ("x.txt", "javascriptreact", "javascript"),
        ("notes.txt", None, None),
        (None, "cobol", None),
        (None, None, None),
    ],
)
def test_detect_language(path: str | None, language_id: str | None, want: str | None) -> None:
    assert detect_language(path, language_id) == want


def test_unknown_language_falls_back_to_plain_text() -> None:
    doc = SyntaxDocument("hello wor", "cobol")
    assert doc.language is None and doc.tree is None
    assert doc.completion_scope(9) is Scope.SINGLE_LINE
    assert doc.generation(9, Scope.SINGLE_LINE).stop_index("ld\nmore") == 2


def test_bad_offsets_are_user_errors() -> None:
    doc = SyntaxDocument("x = 1\n", "python")
    with pytest.raises(UserError):
        doc.completion_scope(99)
    with pytest.raises(UserError):
        doc.apply_edit(3, 1, "")
    with pytest.raises(UserError):
        doc.generation(0, "multi")  # type: ignore[arg-type]


def _clear_caches() -> None:
    languages._specs.cache_clear()
    languages._load.cache_clear()


def test_grammars_dir_override_and_bad_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "py2").mkdir()
    (tmp_path / "py2" / "language.toml").write_text(
        'name = "py2"\nextensions = [".py2"]\n[grammar]\nmodule = "tree_sitter_python"\n'
    )
    (tmp_path / "py2" / "keys.scm").write_text('"." @key.after\n')
    monkeypatch.setenv(languages.GRAMMARS_ENV, str(tmp_path))
    _clear_caches()
    try:
        assert available_languages() == ["py2"]  # a new language is a folder, not code
        assert detect_language("a.py2", None) == "py2"
        assert SyntaxDocument("x.y", "py2").generation(3, Scope.SINGLE_LINE).is_key_next(".") is True
        (tmp_path / "py2" / "scope.scm").write_text("(no_such_node) @scope.text\n")
        _clear_caches()
        with pytest.raises(UserError, match="bad query"):
            SyntaxDocument("x", "py2")
        (tmp_path / "py2" / "language.toml").write_text("name = [broken\n")
        _clear_caches()
        with pytest.raises(UserError, match="language.toml"):
            available_languages()
        monkeypatch.setenv(languages.GRAMMARS_ENV, str(tmp_path / "missing"))
        with pytest.raises(UserError, match="not a directory"):
            available_languages()
    finally:
        monkeypatch.delenv(languages.GRAMMARS_ENV)
        _clear_caches()


def test_step_cost_under_one_millisecond_on_2000_lines() -> None:
    for language in ("python", "javascript", "go"):
        result = measure_step_cost(language, lines=2000)
        assert float(result["lines"]) >= 1990
        assert float(result["mean_ms"]) < 1.0, result
