"""The editors' copies of the settings table (dspark_lsp/settings_schema.py), written and checked.

Issue 15: the ranges had been copied by hand into the VS Code extension and drifted (maxNewTokens up to
2048 on the server but 4096 in VS Code, contextWindow 32-32768 vs 16-131072, ...). Now
`python -m dspark_lsp.lsp.settings_schema --write-vscode` regenerates `contributes.configuration` in
editors/vscode/package.json (client-only entries such as `serverPath` are kept as they are), and
`--write-nvim` the Neovim plugin's editors/nvim/lua/dspark/schema.lua; `--check` fails when either file
is stale. tests/lsp/test_settings_schema.py checks both files, the extension's own checks
(editors/vscode/src/settings.ts) and ServiceConfig's validation against the table.

The table itself lives outside the LSP package because the service (below this layer) reads it too;
its names are re-exported here for the LSP layer's callers. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dspark_lsp.settings_schema import BY_NAME, SETTINGS, Setting, _num, editor_settings, validate
from dspark_lsp.settings_schema import _json as _json  # the tests format defaults with it

__all__ = [
    "BY_NAME", "SETTINGS", "Setting", "editor_settings", "validate",
    "main", "nvim_schema_text", "vscode_package", "vscode_package_text", "vscode_property",
]

# -------------------------------------------------------------------------------- editor files
ROOT = Path(__file__).resolve().parents[2]
VSCODE_PACKAGE = ROOT / "editors" / "vscode" / "package.json"
NVIM_SCHEMA = ROOT / "editors" / "nvim" / "lua" / "dspark" / "schema.lua"
GENERATOR = "python -m dspark_lsp.lsp.settings_schema"


def vscode_property(s: Setting) -> dict[str, Any]:
    """The `contributes.configuration.properties["dspark.<name>"]` entry for one setting."""
    prop: dict[str, Any] = {"type": [s.kind, "null"] if s.nullable else s.kind, "default": s.default}
    if s.enum is not None:
        prop["enum"] = list(s.enum)
    if s.minimum is not None:
        # VS Code's settings validation understands draft-07's numeric exclusiveMinimum.
        prop["exclusiveMinimum" if s.exclusive_minimum else "minimum"] = s.minimum
    if s.maximum is not None:
        prop["maximum"] = s.maximum
    if s.non_empty:
        prop["minLength"] = 1
    if s.pattern is not None:
        prop["pattern"] = f"^({s.pattern})$"
        prop["patternErrorMessage"] = f"Must be {s.expected()}."
    prop["markdownDescription" if s.markdown else "description"] = s.description
    return prop


def vscode_package(package: dict[str, Any]) -> dict[str, Any]:
    """`package` (the parsed package.json) with the schema's entries regenerated in place. Entries the
    schema does not own (the client's launch settings, `completionItems`, `trace.server`) stay as they
    are; an owned entry missing from the file is added after the last owned one."""
    config = package["contributes"]["configuration"]
    old: dict[str, Any] = config["properties"]
    owned = {f"dspark.{s.name}": vscode_property(s) for s in editor_settings()}
    stale = {f"dspark.{s.name}" for s in SETTINGS if not s.in_editors}
    props: dict[str, Any] = {}
    for key, value in old.items():
        if key in stale:
            continue  # no longer offered in the settings UI
        if key in owned:
            if not any(k in props for k in owned):
                props.update(owned)  # the schema's block, in the schema's order, where it began
            continue
        props[key] = value
    if not any(k in props for k in owned):
        props.update(owned)
    config["properties"] = props
    return package


def vscode_package_text(current: str) -> str:
    """package.json's text with only the `contributes.configuration.properties` object rewritten (the
    rest of the file stays byte for byte as it is)."""
    props = vscode_package(json.loads(current))["contributes"]["configuration"]["properties"]
    key_at = current.find('"properties"', current.find('"configuration"'))
    start = current.find("{", key_at)
    if key_at < 0 or start < 0:
        raise ValueError("package.json has no contributes.configuration.properties object")
    _old, end = json.JSONDecoder().raw_decode(current, start)
    line_start = current.rfind("\n", 0, key_at) + 1
    indent = current[line_start:key_at]
    return current[:start] + _format_json(props, indent, len('"properties": ')) + current[end:]


_INLINE_WIDTH = 160  # package.json's hand-written style: short objects and scalar lists on one line


def _format_json(value: Any, indent: str = "", prefix_len: int = 0) -> str:
    """JSON with 2-space indentation where objects of scalars (and lists of scalars) that fit in
    _INLINE_WIDTH stay on one line, as `{ "a": 1, "b": [2, 3] }`: regenerating package.json keeps its
    look instead of exploding every small entry over several lines."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return "[" + ", ".join(dump(v) for v in value) + "]"
    flat = isinstance(value, dict) and indent and all(
        not isinstance(v, dict) and (not isinstance(v, list) or all(not isinstance(x, (dict, list)) for x in v))
        for v in value.values()
    )
    if flat and value:
        inline = "{ " + ", ".join(f"{dump(k)}: {_format_json(v)}" for k, v in value.items()) + " }"
        if len(indent) + prefix_len + len(inline) <= _INLINE_WIDTH:
            return inline
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{dump(k)}: {_format_json(v, inner, len(dump(k)) + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + _format_json(v, inner) for v in value) + "\n" + indent + "]"
    return dump(value)


def _lua(value: Any) -> str:
    if value is None:
        return "vim.NIL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _num(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string literal is a valid Lua string literal for our text
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(_lua(v) for v in value) + " }"
    raise TypeError(f"no Lua literal for {value!r}")


def nvim_schema_text() -> str:
    """editors/nvim/lua/dspark/schema.lua: the editor settings as a Lua list (config.lua validates
    `settings = {...}` with it and takes its defaults from it)."""
    lines = [
        f"-- Generated by `{GENERATOR} --write-nvim` from dspark_lsp/settings_schema.py: do not edit.",
        "-- The server settings the plugin accepts in setup({ settings = {...} }), with the server's types,",
        "-- ranges and defaults. `type` is the JSON type (\"integer\": a whole Lua number).",
        "return {",
    ]
    for s in editor_settings():
        fields: list[tuple[str, Any]] = [("name", s.name), ("type", s.kind), ("default", s.default)]
        if s.nullable:
            fields.append(("nullable", True))
        if s.minimum is not None:
            fields.append(("minimum", s.minimum))
        if s.exclusive_minimum:
            fields.append(("exclusive_minimum", True))
        if s.maximum is not None:
            fields.append(("maximum", s.maximum))
        if s.enum is not None:
            fields.append(("enum", list(s.enum)))
        if s.non_empty:
            fields.append(("non_empty", True))
        fields.append(("expected", s.expected()))
        lines.append("  { " + ", ".join(f"{k} = {_lua(v)}" for k, v in fields) + " },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description="Write or check the editors' copies of the settings schema.")
    parser.add_argument("--write-vscode", action="store_true", help=f"rewrite {VSCODE_PACKAGE.relative_to(ROOT)}'s configuration")
    parser.add_argument("--write-nvim", action="store_true", help=f"rewrite {NVIM_SCHEMA.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 when either file differs from the schema")
    parser.add_argument("--json", action="store_true", help="print the schema as JSON")
    args = parser.parse_args(argv)
    targets = [
        (VSCODE_PACKAGE, vscode_package_text(VSCODE_PACKAGE.read_text(encoding="utf-8")), args.write_vscode),
        (NVIM_SCHEMA, nvim_schema_text(), args.write_nvim),
    ]
    if args.json:
        print(json.dumps({s.name: vscode_property(s) | {"in_editors": s.in_editors} for s in SETTINGS}, indent=2))
    stale = 0
    for path, text, write in targets:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if write and current != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
        elif args.check and current != text:
            stale += 1
            print(f"{path.relative_to(ROOT)} differs from the settings schema: run {GENERATOR} --write-vscode --write-nvim")
    if not (args.write_vscode or args.write_nvim or args.check or args.json):
        parser.print_help(sys.stderr)
        return 2
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
