"""A UTF-8 buffer and its tree-sitter tree, kept in step by ``tree.edit`` + incremental reparse."""

from __future__ import annotations

from tree_sitter import Parser, Tree

from dspark_lsp.syntax.textutil import Point, advance_point


class IncrementalTree:
    """Owns the bytes and the tree; every change is an edit (never a parse from scratch)."""

    def __init__(self, parser: Parser | None, data: bytes, tree: Tree | None = None) -> None:
        self.parser = parser
        self.data = data
        if parser is not None and tree is None:
            tree = parser.parse(data)
        self.tree = tree

    def replace(self, start: int, old_end: int, new: bytes, start_point: Point) -> None:
        """Replace bytes ``[start, old_end)`` (which begin at ``start_point``) with ``new``."""
        old = self.data[start:old_end]
        self.data = self.data[:start] + new + self.data[old_end:]
        if self.tree is None or self.parser is None:
            return
        self.tree.edit(
            start_byte=start,
            old_end_byte=old_end,
            new_end_byte=start + len(new),
            start_point=start_point,
            old_end_point=advance_point(start_point, old),
            new_end_point=advance_point(start_point, new),
        )
        self.tree = self.parser.parse(self.data, self.tree)
