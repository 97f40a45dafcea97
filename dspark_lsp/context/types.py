"""The context's data: what goes into the prompt from other files, and which sources are on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["open", "definition"]


@dataclass(frozen=True)
class ContextFile:
    """One piece of another file for the prompt: shown to the model as ``<|file_sep|>path`` + ``text``.

    ``path`` is relative to the workspace folder when the file lies under one (the model was trained on
    repository-relative paths), else the file's name. ``text`` is a chunk of lines or a definition's
    outline, never more than the caller's budget."""

    path: str
    text: str
    source: Source
