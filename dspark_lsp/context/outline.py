"""What the model needs of a definition in another file: its outline, not its body.

A function is its signature (decorators, doc comment or docstring included) with the body elided; a
class (struct, trait, impl, interface) its header with its fields' lines and its methods' signatures and
the first line of its docstring; a constant or variable its assignment line; a type, interface, enum or
struct its declaration (bounded in lines). ``name=None`` gives the module's top-level outline. Every
result is within ``max_chars``. Language-aware through tree-sitter node kinds (Python, JS/TS/TSX, Go,
Rust, Java, C/C++).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tree_sitter import Node, Tree

from dspark_lsp.context.imports import parse

MAX_CHARS = 1500
DOC_LINES = 8  # a function's docstring / doc comment: its first lines carry the contract
WHOLE_LINES = 24  # a struct, interface or enum shown whole up to this many lines
FIELD_LINES = 3  # a field or constant: its first lines
ELIDED = "..."
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
# Bodies shown as `{ ... }` (else an expression body: `=> ...`).
BLOCKS = frozenset({"statement_block", "block", "compound_statement", "constructor_body", "declaration_list"})


@dataclass(frozen=True)
class _Kinds:
    """The node kinds of one language that the outline knows."""

    functions: frozenset[str]  # signature + elided body
    containers: frozenset[str]  # header + members' outlines
    wholes: frozenset[str]  # their own (bounded) text
    wrappers: frozenset[str] = frozenset()  # unwrapped to the declaration inside (export, decorators)
    comments: frozenset[str] = frozenset({"comment"})
    scopes: frozenset[str] = frozenset()  # whose body holds more top-level definitions (C++ namespaces)


def _k(*names: str) -> frozenset[str]:
    return frozenset(names)


_JS = _Kinds(
    functions=_k("function_declaration", "generator_function_declaration", "method_definition",
                 "function_signature", "method_signature", "abstract_method_signature"),
    containers=_k("class_declaration", "abstract_class_declaration", "class"),
    wholes=_k("interface_declaration", "type_alias_declaration", "enum_declaration", "lexical_declaration",
              "variable_declaration", "public_field_definition", "field_definition", "property_signature"),
    wrappers=_k("export_statement"),
)  # fmt: skip
_C = _Kinds(
    functions=_k("function_definition"),
    containers=_k("class_specifier", "struct_specifier"),
    wholes=_k("declaration", "type_definition", "preproc_def", "preproc_function_def", "enum_specifier",
              "union_specifier", "field_declaration", "alias_declaration"),
    wrappers=_k("template_declaration"),
    scopes=_k("namespace_definition", "linkage_specification", "preproc_ifdef", "preproc_if", "preproc_else",
              "preproc_elif"),
)  # fmt: skip
KINDS: dict[str, _Kinds] = {
    "python": _Kinds(
        functions=_k("function_definition"),
        containers=_k("class_definition"),
        wholes=_k("expression_statement"),
        wrappers=_k("decorated_definition"),
    ),
    "javascript": _JS, "typescript": _JS, "tsx": _JS,
    "go": _Kinds(
        functions=_k("function_declaration", "method_declaration"),
        containers=_k(),
        wholes=_k("type_declaration", "const_declaration", "var_declaration"),
    ),
    "rust": _Kinds(
        functions=_k("function_item", "function_signature_item"),
        containers=_k("impl_item", "trait_item"),
        wholes=_k("struct_item", "enum_item", "union_item", "type_item", "const_item", "static_item",
                  "macro_definition"),
        comments=_k("line_comment", "block_comment"),
    ),
    "java": _Kinds(
        functions=_k("method_declaration", "constructor_declaration"),
        containers=_k("class_declaration", "interface_declaration", "enum_declaration", "record_declaration"),
        wholes=_k("field_declaration", "constant_declaration", "annotation_type_declaration"),
        comments=_k("line_comment", "block_comment"),
    ),
    "c": _C, "cpp": _C,
}  # fmt: skip


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _lines(text: str, limit: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:limit] + ([ELIDED] if len(lines) > limit else []))


def _c_name(node: Node | None) -> str | None:
    """The name a C/C++ declarator declares, through pointers, arrays, functions and qualifications."""
    while node is not None:
        if node.type in ("identifier", "field_identifier", "type_identifier", "qualified_identifier",
                         "destructor_name", "operator_name"):  # fmt: skip
            return _text(node).rsplit("::", 1)[-1]
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.named_children if c.type.endswith("declarator") or c.type == "identifier"), None)
    return None


def _names(node: Node, language: str) -> list[str]:
    """The names a top-level definition node defines."""
    if language in ("c", "cpp"):
        if node.type in ("function_definition", "declaration", "type_definition", "field_declaration"):
            found = [_c_name(d) for d in node.children_by_field_name("declarator")]
            kind = node.child_by_field_name("type")
            tag = kind.child_by_field_name("name") if kind is not None else None
            return [n for n in found if n] + ([_text(tag)] if tag is not None else [])
    if node.type == "expression_statement" and node.named_children:  # Python: NAME = ... / NAME: T = ...
        assign = node.named_children[0]
        left = assign.child_by_field_name("left") if assign.type == "assignment" else None
        return [_text(n) for n in ([left] if left is not None and left.type == "identifier" else [])]
    if node.type in ("lexical_declaration", "variable_declaration", "field_declaration", "constant_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        return [_text(n) for d in declarators if (n := d.child_by_field_name("name")) is not None]
    if node.type in ("type_declaration", "const_declaration", "var_declaration"):  # Go
        specs = [s for c in node.named_children for s in ([c] if not c.type.endswith("_list") else c.named_children)]
        return [_text(n) for s in specs for n in s.children_by_field_name("name")]
    if node.type == "impl_item":  # Rust: methods of the type (listed under the type's name)
        kind = node.child_by_field_name("type")
        return [_text(kind).split("<", 1)[0]] if kind is not None else []
    name = node.child_by_field_name("name")
    return [_text(name)] if name is not None else []


@dataclass
class _Def:
    names: list[str]
    node: Node  # the declaration
    start: Node  # where its text starts: decorators or the export keyword included
    default: bool = False  # a JS default export


@dataclass
class Outliner:
    """One parse of a file's text, with its top-level definitions' outlines on demand (cached)."""

    text: str
    language: str
    tree: Tree | None = None
    _defs: list[_Def] | None = None
    _by_name: dict[str, list[_Def]] | None = None
    _memo: dict[str, str | None] = field(default_factory=dict)  # name -> full outline
    _module_parts: list[str] | None = None

    _words: frozenset[str] | None = None
    _reexports: list[Any] | None = None

    def __post_init__(self) -> None:
        self.kinds = KINDS.get(self.language)
        self._src = self.text.encode("utf-8", "surrogatepass")

    @property
    def words(self) -> frozenset[str]:
        """Every identifier the text spells: a name not among them is not defined here (no parse)."""
        if self._words is None:
            self._words = frozenset(_WORD.findall(self.text))
        return self._words

    def reexports(self, find: Callable[[], list[Any]]) -> list[Any]:
        """The file's re-export imports (``find`` lists its imports; asked once per text)."""
        if self._reexports is None:
            self._reexports = [i for i in find() if getattr(i, "reexport", False)]
        return self._reexports

    def definitions(self) -> list[_Def]:
        if self._defs is None:
            if self.tree is None and self.kinds is not None:  # parsed on the first question, not before
                self.tree = parse(self.text, self.language)
            self._defs = [] if self.tree is None else list(self._top_level(self.tree.root_node))
        return self._defs

    def _top_level(self, root: Node) -> list[_Def]:
        assert self.kinds is not None
        out: list[_Def] = []
        for child in root.named_children:
            node, default = child, False
            while node.type in self.kinds.wrappers:
                default = default or any(c.type == "default" for c in node.children)
                inner = node.child_by_field_name("declaration") or node.child_by_field_name("definition")
                inner = inner or node.child_by_field_name("value")
                if inner is None and node.named_children:
                    inner = node.named_children[-1]
                if inner is None:
                    break
                node = inner
            if node.type in self.kinds.scopes:  # a namespace's body; an include guard's own children
                out += self._top_level(node.child_by_field_name("body") or node)
            elif node.type in self.kinds.functions | self.kinds.containers | self.kinds.wholes or default:
                out.append(_Def(_names(node, self.language), node, child, default))
        return out

    def of(self, name: str | None, max_chars: int = MAX_CHARS) -> str | None:
        """The outline of ``name``'s top-level definition (every one of that name: Go and Rust methods sit
        apart from their type), or of the module when ``name`` is None; within ``max_chars``."""
        if name is None:
            return self._module(max_chars)
        if name not in self._memo:
            self._memo[name] = self._named(name)
        full = self._memo[name]
        return _within(full, max_chars) if full is not None else None

    def _named(self, name: str) -> str | None:
        if self._by_name is None:
            self._by_name = {}
            for d in self.definitions():
                for n in d.names + (["default"] if d.default else []):
                    self._by_name.setdefault(n, []).append(d)
        defs = list(self._by_name.get(name, ()))
        if self.language == "go":  # a type's methods: func (r *T) M(...)
            defs += [d for d in self.definitions() if d.node.type == "method_declaration" and _receiver(d.node) == name]
        if not defs and self.language == "java":  # a static import's member: inside the file's class
            members = [m for d in self.definitions() if d.node.type.endswith("_declaration") for m in _members(d.node)]
            defs += [_Def([name], m, m) for m in members if name in _names(m, "java")]
        parts = [p for p in (self._render(d, full=True) for d in defs) if p]
        return "\n\n".join(parts) if parts else None

    def _module(self, max_chars: int) -> str | None:
        if self._module_parts is None:
            self._module_parts = [p for p in (self._render(d, full=False) for d in self.definitions()) if p]
        parts: list[str] = []
        used = 0
        for piece in self._module_parts:
            if used + len(piece) + 2 > max_chars:
                break
            parts.append(piece)
            used += len(piece) + 2
        if not parts and self._module_parts:  # one definition larger than the budget: its first lines
            return _within(self._module_parts[0], max_chars)
        return "\n\n".join(parts) or None

    def _render(self, d: _Def | Node, *, full: bool) -> str:
        """``full``: a docstring's first lines and a struct whole; else (a module outline) one line each."""
        node, start = (d.node, d.start) if isinstance(d, _Def) else (d, d)
        kinds = self.kinds
        assert kinds is not None
        doc = self._doc_comment(start) if full else ""
        if node.type in kinds.containers:
            body = self._container(node, start, full)
        elif node.type in kinds.functions or _function_value(node) is not None:
            body = self._signature(node, start, full)
        else:
            body = _lines(self._from(start, node.end_byte), WHOLE_LINES if full else FIELD_LINES)
        return doc + body

    # -- pieces ------------------------------------------------------------------------------------
    def _from(self, start: Node, end: int) -> str:
        """The source from ``start``'s line start (its indentation kept) to byte ``end``."""
        src = self._src
        line_start = src.rfind(b"\n", 0, start.start_byte) + 1
        head = src[line_start:start.start_byte]
        lead = head if not head.strip() else b""
        return (lead + src[start.start_byte:end]).decode("utf-8", "replace").rstrip()

    def _doc_comment(self, start: Node) -> str:
        """The comment lines right above a definition (JSDoc, ///, Javadoc, Go doc), bounded."""
        assert self.kinds is not None
        comments: list[Node] = []
        prev, row = start.prev_named_sibling, start.start_point.row
        while prev is not None and prev.type in self.kinds.comments and prev.end_point.row >= row - 1:
            comments.insert(0, prev)
            row = prev.start_point.row
            prev = prev.prev_named_sibling
        if not comments:
            return ""
        return _lines(self._from(comments[0], comments[-1].end_byte), DOC_LINES) + "\n"

    def _signature(self, node: Node, start: Node, full: bool) -> str:
        value = _function_value(node)
        body = (value or node).child_by_field_name("body")
        if body is None:
            return _lines(self._from(start, node.end_byte), FIELD_LINES if not full else WHOLE_LINES)
        head = self._from(start, body.start_byte)
        if self.language != "python":
            return f"{head} {{ {ELIDED} }}" if body.type in BLOCKS else f"{head} {ELIDED}"
        indent = self._indent(node) + "    "
        doc = _docstring(body)
        if doc is None:
            return f"{head} {ELIDED}"
        doc = _lines(doc, DOC_LINES) if full else _first_line(doc)
        return f"{head}\n{indent}{doc}" + (f"\n{indent}{ELIDED}" if full else "")

    def _indent(self, node: Node) -> str:
        line_start = self._src.rfind(b"\n", 0, node.start_byte) + 1
        head = self._src[line_start:node.start_byte].decode("utf-8", "replace")
        return head if not head.strip() else ""

    def _container(self, node: Node, start: Node, full: bool) -> str:
        body = node.child_by_field_name("body")
        if body is None:
            return _lines(self._from(start, node.end_byte), WHOLE_LINES)
        lines = [self._from(start, body.start_byte)]
        if self.language == "python":
            doc = _docstring(body)
            if doc:
                lines.append(self._indent(node) + "    " + _first_line(doc))
        else:
            lines[0] += " {"
        inner_indent = self._indent(node) + "    "
        for member in _members(node):
            piece = self._member(member)
            if piece:  # a member on the header's line (`impl X { fn f() {} }`) gets its own indented line
                lines.append(inner_indent + piece if member.start_point.row == body.start_point.row else piece)
        if self.language != "python":
            lines.append(self._indent(node) + "}")
        return "\n".join(lines)

    def _member(self, member: Node) -> str | None:
        assert self.kinds is not None
        inner = member
        while inner.type in self.kinds.wrappers and inner.named_children:
            inner = inner.child_by_field_name("definition") or inner.named_children[-1]
        if inner.type in self.kinds.comments or (self.language == "python" and _is_docstring(inner)):
            return None
        if inner.type == "access_specifier":  # C++ `public:` (the colon is a separate token)
            return self._from(inner, inner.end_byte) + ":"
        if inner.type in self.kinds.functions or _function_value(inner) is not None:
            return self._signature(inner, member, full=False)
        if inner.type in self.kinds.containers:  # a nested class: its header only
            body = inner.child_by_field_name("body")
            return self._from(member, body.start_byte if body is not None else inner.end_byte) + f" {ELIDED}"
        return _lines(self._from(member, inner.end_byte), FIELD_LINES)


def _members(node: Node) -> list[Node]:
    body = node.child_by_field_name("body")
    return list(body.named_children) if body is not None else []


def _function_value(node: Node) -> Node | None:
    """The function a declaration binds (`const f = (a) => ...`, `static s = () => 1`), if that is all."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        node = declarators[0] if len(declarators) == 1 else node
    if node.type in ("variable_declarator", "public_field_definition", "field_definition"):
        value = node.child_by_field_name("value")
        if value is not None and value.type in ("arrow_function", "function_expression", "function"):
            return value
    return None


def _receiver(node: Node) -> str | None:
    """A Go method's receiver type name: `func (p *Point) Move()` -> Point."""
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    text = _text(receiver).strip("() ")
    return text.split()[-1].lstrip("*").split("[", 1)[0] if text else None


def _is_docstring(node: Node) -> bool:
    return node.type == "expression_statement" and bool(node.named_children) and node.named_children[0].type == "string"


def _docstring(body: Node) -> str | None:
    first = body.named_children[0] if body.named_children else None
    return _text(first).strip() if first is not None and _is_docstring(first) else None


def _first_line(doc: str) -> str:
    """A docstring's first line, closed with its own quotes when it runs on."""
    first = doc.splitlines()[0] if doc else ""
    if first == doc:
        return doc
    quote = next((q for q in ('"""', "'''", '"', "'") if first.lstrip("rbuRBU").startswith(q)), '"""')
    return first + quote


def _within(text: str, max_chars: int) -> str | None:
    """Cut at a line boundary to ``max_chars`` (None when not even one line fits)."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max(0, max_chars - len(ELIDED) - 1))
    return (text[:cut] + "\n" + ELIDED) if cut > 0 else None


def outline(text: str, language: str, name: str | None = None, *, max_chars: int = MAX_CHARS) -> str | None:
    """The outline of ``name``'s top-level definition in ``text`` (None: not defined there, or an unknown
    language), or of the whole module when ``name`` is None."""
    if language not in KINDS:
        return None
    return Outliner(text, language).of(name, max_chars)
