"""LSP positions <-> code-point offsets, as the LSP layer names them.

The implementation lives in `dspark_lsp.textpos` (no torch, no pygls), so the command line uses the same
code without importing this package; see its module doc for the encodings and the out-of-range policy.
"""

from __future__ import annotations

from dspark_lsp.textpos import (
    Encoding,
    PositionError,
    code_units,
    column_to_index,
    dominant_line_ending,
    index_to_column,
    line_starts,
    normalize_encoding,
    offset_to_position,
    position_to_offset,
)

__all__ = [
    "Encoding",
    "PositionError",
    "code_units",
    "column_to_index",
    "dominant_line_ending",
    "index_to_column",
    "line_starts",
    "normalize_encoding",
    "offset_to_position",
    "position_to_offset",
]
