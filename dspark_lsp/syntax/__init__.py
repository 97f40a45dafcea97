"""Syntax layer: tree-sitter documents, key positions, completion scope and stop rules.

Imports tree-sitter and grammar wheels only (never torch, the engine or the LSP layer); the service turns
these answers into plain callables for the decoder.
"""

from dspark_lsp.syntax.document import SyntaxDocument
from dspark_lsp.syntax.generation import GenerationTracker
from dspark_lsp.syntax.languages import available_languages, detect_language
from dspark_lsp.syntax.scope import Scope
from dspark_lsp.syntax.stops import StopConfig

__all__ = [
    "GenerationTracker",
    "Scope",
    "StopConfig",
    "SyntaxDocument",
    "available_languages",
    "detect_language",
]
