"""Pick the other files' context for one completion, from each source that is on, within a budget.

The result is in prompt order, least important first: the prompt builder drops pieces from the front
when the tokens run out, and what sits nearest the current file (last) weighs most with the model.
Open-document chunks come first, then the definitions of names used near the cursor, the nearest
name last. Both lists are deterministic functions of text that changes little while the user types
(the chunk ranking ignores the cursor's own line), so consecutive prompts keep their context, and with it
the KV the prefix cache holds for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark_lsp.context.ring import ChunkRing, query_text
from dspark_lsp.context.types import ContextFile

# A generous characters-per-token ratio for code: the char budget only pre-selects; the prompt builder
# counts real tokens and drops what does not fit.
CHARS_PER_TOKEN = 4
# The share of the budget definitions may take before open-document chunks get the rest. Definitions are
# few and exact (a signature); chunks are many and fuzzy, and fill what is left.
DEFINITION_SHARE = 0.5


@dataclass(frozen=True)
class ContextSettings:
    open_files: bool = True
    definitions: bool = True
    # Languages whose completions get definitions; None = every language.
    definition_languages: frozenset[str] | None = None

    @property
    def any(self) -> bool:
        return self.open_files or self.definitions

    def defines(self, language: str | None) -> bool:
        """Whether a completion in ``language`` gets definitions."""
        if not self.definitions or language is None:
            return False
        return self.definition_languages is None or language in self.definition_languages


def parse_languages(value: str) -> frozenset[str] | None:
    """The `contextDefinitionLanguages` setting: "*" = every language (None), else the named ids."""
    if value.strip() == "*":
        return None
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def gather_context(
    text: str,
    offset: int,
    path: str | None,
    language: str | None,
    *,
    ring: ChunkRing | None,
    lookup: Any | None,
    settings: ContextSettings,
    budget_tokens: int,
) -> tuple[ContextFile, ...]:
    """Context pieces for a completion at ``offset`` of ``text`` (the document at ``path``, which the
    ring knows under the same name). ``lookup`` resolves imports to files (a Workspace, or open
    documents over one); None = no definitions."""
    if budget_tokens <= 0 or not settings.any:
        return ()
    budget = budget_tokens * CHARS_PER_TOKEN
    definitions: list[ContextFile] = []
    if settings.defines(language) and lookup is not None and language is not None:
        from dspark_lsp.context.definitions import definitions_for

        share = budget if not settings.open_files else int(budget * DEFINITION_SHARE)
        found = definitions_for(text, offset, path, language, lookup, max_chars=share)
        definitions = [d for d in found if d.path != path][::-1]  # nearest name last
    chunks: list[ContextFile] = []
    if settings.open_files and ring is not None:
        left = budget - sum(len(d.text) for d in definitions)
        chunks = ring.pick(query_text(text, offset), exclude=path, language=language, max_chars=left)
    return (*chunks, *definitions)
