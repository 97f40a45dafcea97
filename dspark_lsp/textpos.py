"""Text positions: LSP (line, UTF-16 column) ⇄ code-point offsets, and reading source files safely."""

from __future__ import annotations

from pathlib import Path

from dspark_lsp.errors import UserError

# Longest file we will read for a completion; larger inputs are almost certainly not source code.
MAX_FILE_BYTES = 16 * 1024 * 1024


def read_text_file(path: Path) -> str:
    """The file's text (UTF-8); a one-line UserError for missing, unreadable or binary files."""
    try:
        if path.is_dir():
            raise UserError(f"{path} is a directory, not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"{path} is {size} bytes; larger than the {MAX_FILE_BYTES} byte limit")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if b"\x00" in data[:8192]:
        raise UserError(f"{path} looks like a binary file (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not valid UTF-8 (byte {exc.start})") from None


def _line_starts(text: str) -> list[int]:
    """Code-point offsets where each line starts; \\r\\n, \\r and \\n all end a line (as LSP says)."""
    starts = [0]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\r":
            if i + 1 < n and text[i + 1] == "\n":
                i += 1
            starts.append(i + 1)
        elif c == "\n":
            starts.append(i + 1)
        i += 1
    return starts


def offset_of_utf16(text: str, line: int, col: int) -> int:
    """Code-point offset of LSP position (line, UTF-16 column); UserError when outside the document."""
    starts = _line_starts(text)
    if line < 0 or col < 0:
        raise UserError(f"position {line}:{col} is negative")
    if line >= len(starts):
        raise UserError(f"line {line} is outside the document ({len(starts)} lines)")
    start = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    body = text[start:end].rstrip("\r\n")
    units = 0
    for i, ch in enumerate(body):
        if units == col:
            return start + i
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > col:
            raise UserError(f"column {col} splits a surrogate pair on line {line}")
    if units == col:
        return start + len(body)
    raise UserError(f"column {col} is past the end of line {line} ({units} UTF-16 units)")
