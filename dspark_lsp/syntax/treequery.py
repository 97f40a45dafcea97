"""Questions asked of a tree-sitter tree through the language's query captures (keys.scm, scope.scm)."""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node, QueryCursor

from dspark_lsp.syntax.languages import LoadedLanguage

TEXT, CODE, NONE = "scope.text", "scope.code", "scope.none"
BLOCK, KEY_AFTER = "scope.block", "key.after"


@dataclass(frozen=True)
class NodeContext:
    """The innermost text/code/none capture strictly containing a byte position."""

    kind: str  # "code" (no capture or @scope.code), "text" or "none"
    node: Node | None = None


class TreeQuestions:
    """One query cursor per owner, re-aimed at a small byte range for each question (cheap)."""

    def __init__(self, loaded: LoadedLanguage) -> None:
        self.loaded = loaded
        self._cursor = QueryCursor(loaded.context_query)

    def _captures(self, root: Node, lo: int, hi: int) -> dict[str, list[Node]]:
        self._cursor.set_byte_range(max(0, lo), max(hi, lo + 1))
        return self._cursor.captures(root)

    def context(self, root: Node, pos: int) -> NodeContext:
        caps = self._captures(root, pos - 1, pos)
        best: tuple[int, str, Node] | None = None
        for name, kind in ((TEXT, "text"), (CODE, "code"), (NONE, "none")):
            for node in caps.get(name, ()):
                if node.start_byte < pos < node.end_byte:
                    span = node.end_byte - node.start_byte
                    if best is None or span < best[0]:
                        best = (span, kind, node)
        if best is None:
            return NodeContext("code")
        return NodeContext(best[1], best[2])

    def text_ending_at(self, root: Node, pos: int) -> Node | None:
        """The comment/string (@scope.text) that ends exactly at byte ``pos``, if any (``context`` does not
        count a position at a node's end as inside it)."""
        ends = [n for n in self._captures(root, pos - 1, pos).get(TEXT, ()) if n.start_byte < pos == n.end_byte]
        return max(ends, key=lambda n: n.end_byte - n.start_byte, default=None)

    def is_key_after(self, root: Node, end: int) -> bool:
        """Does a @key.after token end exactly at byte ``end``?"""
        return any(n.end_byte == end for n in self._captures(root, end - 1, end).get(KEY_AFTER, ()))

    def in_block(self, root: Node, pos: int) -> bool:
        """Is the innermost named node around ``pos`` a statement container (@scope.block)?"""
        node = root.named_descendant_for_byte_range(pos, pos)
        if node is None or node.is_error or node.parent is None:
            return True  # the root or an ERROR region: nothing says we are mid-statement
        blocks = self._captures(root, pos - 1, pos + 1).get(BLOCK, ())
        return any(b.id == node.id for b in blocks)
