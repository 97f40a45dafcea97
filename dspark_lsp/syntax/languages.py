"""Language registry: reads ``grammars/<lang>/language.toml`` + query files, loads grammar wheels.

Languages are data: a folder with a ``language.toml`` (which grammar wheel, extensions, LSP ids, comment
and block style) and two query files.  A grammar wheel that is not installed makes its language
unavailable (documents fall back to plain text); a broken folder is a :class:`UserError` naming the file.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tree_sitter import Language, Query, QueryError

from dspark_lsp.errors import UserError

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

GRAMMARS_ENV = "DSPARK_GRAMMARS_DIR"
BLOCK_STYLES = ("indent", "braces")


@dataclass(frozen=True)
class LanguageSpec:
    """What ``language.toml`` says about one language."""

    name: str
    directory: Path
    module: str
    function: str
    extensions: tuple[str, ...]
    language_ids: tuple[str, ...]
    line_comment: str | None = None
    block_comment: tuple[str, str] | None = None
    string_quotes: tuple[str, ...] = ('"', "'")
    block_style: str = "braces"
    block_openers: tuple[str, ...] = ("{",)


@dataclass
class LoadedLanguage:
    """A spec with its grammar and compiled queries (one per process, shared by all documents)."""

    spec: LanguageSpec
    language: Language
    # keys.scm + scope.scm compiled together: one cursor run answers both questions per decode step.
    context_query: Query
    keywords: frozenset[str] = field(default_factory=frozenset)


def grammars_dir() -> Path:
    """``$DSPARK_GRAMMARS_DIR``, else the package's own ``dspark_lsp/grammars/``, else the ``grammars/``
    folder at the repository root.

    The data lives in the top-level ``grammars/`` of a checkout; ``dspark_lsp/grammars`` is a symlink to
    it, which the wheel build follows, so an installed (non-editable) package carries its grammars. The
    root fallback serves a checkout where git made no symlink (core.symlinks=false).
    """
    env = os.environ.get(GRAMMARS_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise UserError(f"{GRAMMARS_ENV}={env!r} is not a directory")
        return path
    packaged = Path(__file__).resolve().parents[1] / "grammars"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "grammars"


def _str_tuple(raw: Any, key: str, where: Path) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise UserError(f"{where}: '{key}' must be a list of strings")
    return tuple(raw)


def parse_spec(directory: Path) -> LanguageSpec:
    """Read and validate ``directory/language.toml``."""
    where = directory / "language.toml"
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{where}: cannot read language file: {exc}") from exc
    grammar = data.get("grammar")
    if not isinstance(grammar, dict) or not isinstance(grammar.get("module"), str):
        raise UserError(f"{where}: needs a [grammar] table with 'module' (and optional 'function')")
    style = data.get("block_style", "braces")
    if style not in BLOCK_STYLES:
        raise UserError(f"{where}: block_style must be one of {BLOCK_STYLES}, not {style!r}")
    block_comment = data.get("block_comment")
    if block_comment is not None:
        pair = _str_tuple(block_comment, "block_comment", where)
        if len(pair) != 2:
            raise UserError(f"{where}: block_comment must be [open, close]")
        block_comment = (pair[0], pair[1])
    line_comment = data.get("line_comment")
    if line_comment is not None and not isinstance(line_comment, str):
        raise UserError(f"{where}: line_comment must be a string")
    return LanguageSpec(
        name=str(data.get("name", directory.name)),
        directory=directory,
        module=grammar["module"],
        function=str(grammar.get("function", "language")),
        extensions=tuple(e.lower() for e in _str_tuple(data.get("extensions", []), "extensions", where)),
        language_ids=tuple(
            i.lower() for i in _str_tuple(data.get("language_ids", []), "language_ids", where)
        ),
        line_comment=line_comment,
        block_comment=block_comment,
        string_quotes=_str_tuple(data.get("string_quotes", ['"', "'"]), "string_quotes", where),
        block_style=style,
        block_openers=_str_tuple(data.get("block_openers", ["{"]), "block_openers", where),
    )


@functools.cache
def _specs(root: Path) -> dict[str, LanguageSpec]:
    specs: dict[str, LanguageSpec] = {}
    if not root.is_dir():
        return specs
    for directory in sorted(root.iterdir()):
        if (directory / "language.toml").is_file():
            spec = parse_spec(directory)
            specs[spec.name] = spec
    return specs


def specs() -> dict[str, LanguageSpec]:
    """All language folders found, by name (whether or not their grammar wheel is installed)."""
    return _specs(grammars_dir())


def _grammar_installed(spec: LanguageSpec) -> bool:
    try:
        return importlib.util.find_spec(spec.module) is not None
    except (ImportError, ValueError):
        return False


def available_languages() -> list[str]:
    """Names of the languages whose folder exists and whose grammar wheel is installed."""
    return sorted(name for name, spec in specs().items() if _grammar_installed(spec))


def detect_language(path: str | None, language_id: str | None) -> str | None:
    """Our language name from an LSP ``languageId`` (preferred) or a file path / URI extension."""
    table = specs()
    if language_id:
        wanted = language_id.strip().lower()
        for spec in table.values():
            if wanted == spec.name or wanted in spec.language_ids:
                return spec.name
    if path:
        name = path.replace("\\", "/").rsplit("/", 1)[-1].split("?", 1)[0].lower()
        # Longest extension first so ".d.ts"-style or ".c++" beat shorter matches.
        matches = [
            (len(ext), spec.name) for spec in table.values() for ext in spec.extensions if name.endswith(ext)
        ]
        if matches:
            return max(matches)[1]
    return None


def _read_query(spec: LanguageSpec, filename: str) -> str:
    path = spec.directory / filename
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""  # an absent query file just means "no captures of that kind"
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read query file: {exc}") from exc


@functools.cache
def _load(root: Path, name: str) -> LoadedLanguage | None:
    spec = _specs(root).get(name)
    if spec is None or not _grammar_installed(spec):
        return None
    try:
        module = importlib.import_module(spec.module)
        language = Language(getattr(module, spec.function)())
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise UserError(
            f"{spec.directory / 'language.toml'}: cannot load grammar {spec.module}.{spec.function}: {exc}"
        ) from exc
    sources = [_read_query(spec, "keys.scm"), _read_query(spec, "scope.scm")]
    try:
        query = Query(language, "\n".join(sources))
    except QueryError as exc:
        raise UserError(f"{spec.directory}: bad query in keys.scm/scope.scm: {exc}") from exc
    # Keywords come from the grammar itself: its anonymous tokens that are words (def, return, fn...).
    keywords = frozenset(
        kind
        for i in range(language.node_kind_count)
        if not language.node_kind_is_named(i)
        and language.node_kind_is_visible(i)
        and (kind := language.node_kind_for_id(i)) is not None
        and kind.isidentifier()
        and not kind.startswith("_")
    )
    return LoadedLanguage(spec=spec, language=language, context_query=query, keywords=keywords)


def load_language(name: str | None) -> LoadedLanguage | None:
    """The loaded language, or None for None / unknown names / grammar wheels not installed."""
    if not name:
        return None
    return _load(grammars_dir(), name)
