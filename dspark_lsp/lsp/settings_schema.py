"""The server's settings, declared once: name, type, range, default, description.

Issue 15: the ranges had been copied by hand into the VS Code extension and drifted (maxNewTokens up to
2048 on the server but 4096 in VS Code, contextWindow 32-32768 vs 16-131072, ...). From here:

* the language server validates incoming settings with `validate` (handlers/configuration.py; the
  LSP-only `enable` / `debounceMs` through `LspSettings`), before they reach the service;
* `python -m dspark_lsp.lsp.settings_schema --write-vscode` regenerates `contributes.configuration` in
  editors/vscode/package.json (client-only entries such as `serverPath` are kept as they are), and
  `--write-nvim` the Neovim plugin's editors/nvim/lua/dspark/schema.lua; `--check` fails when either
  file is stale. tests/test_settings_schema.py checks both files, the extension's own checks
  (editors/vscode/src/settings.ts) and ServiceConfig's validation against this table.

`ServiceConfig.problems` (service.py) keeps its own checks for configs built in Python (the CLI, the
benchmarks); the test probes it at every bound here, so the two cannot drift apart unnoticed.

Standard library only: the schema is read by tools that must not import torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["boolean", "integer", "number", "string"]
JsonValue = bool | int | float | str | None


@dataclass(frozen=True)
class Setting:
    name: str  # camelCase, as clients send it (VS Code: `dspark.<name>`)
    kind: Kind
    default: JsonValue
    description: str
    # The description is Markdown (VS Code's markdownDescription); otherwise plain text.
    markdown: bool = False
    nullable: bool = False  # null is a valid value (it means "the default behaviour")
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False  # minimum itself is invalid: (minimum, maximum]
    enum: tuple[str, ...] | None = None
    # A regular expression a string must match in full (VS Code's `pattern`; checked here too).
    pattern: str | None = None
    pattern_hint: str = ""  # what the pattern means, for error messages
    non_empty: bool = False  # strings: "" is invalid
    # Validated by the LSP layer itself (LspSettings) rather than handed on to the service.
    lsp_only: bool = False
    # Offered by the editor clients (VS Code settings UI, Neovim's option check). The others are
    # advanced knobs a client can still send in initializationOptions.
    in_editors: bool = True

    def expected(self) -> str:
        """What a valid value is, in words (error messages on every side use this)."""
        if self.enum is not None:
            text = "one of " + ", ".join(self.enum)
        elif self.kind == "boolean":
            text = "true or false"
        elif self.kind in ("integer", "number"):
            noun = "an integer" if self.kind == "integer" else "a number"
            lo = "(" if self.exclusive_minimum else "["
            text = f"{noun} in {lo}{_num(self.minimum)}, {_num(self.maximum)}]"
        elif self.pattern is not None:
            text = self.pattern_hint or f"a string matching {self.pattern}"
        else:
            text = "a non-empty string" if self.non_empty else "a string"
        return f"{text} or null" if self.nullable else text

    def check(self, value: Any) -> bool:
        import re

        if value is None:
            return self.nullable
        if self.kind == "boolean":
            return isinstance(value, bool)
        if self.kind in ("integer", "number"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            if self.kind == "integer" and not isinstance(value, int):
                return False
            if value != value:  # NaN
                return False
            if self.minimum is not None and (value <= self.minimum if self.exclusive_minimum else value < self.minimum):
                return False
            return self.maximum is None or value <= self.maximum
        if not isinstance(value, str):
            return False
        if self.enum is not None:
            return value in self.enum
        if self.non_empty and not value:
            return False
        return self.pattern is None or re.fullmatch(self.pattern, value) is not None

    def problem(self, value: Any) -> str | None:
        if self.check(value):
            return None
        return f"dspark.{self.name} must be {self.expected()}, got {_json(value)}; using {_json(self.default)}"


def _num(x: float | None) -> str:
    if x is None:
        return "..."
    return str(int(x)) if float(x).is_integer() else str(x)


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


# Order: how the settings UIs list them. Defaults equal ServiceConfig's / LspSettings' (tested).
SETTINGS: tuple[Setting, ...] = (
    Setting("enable", "boolean", True, "Show DSpark completions.", lsp_only=True),
    Setting(
        "model",
        "string",
        "default",
        "Target model: a pair name, a known model name, a local directory or a Hugging Face id.",
        non_empty=True,
    ),
    Setting(
        "draftModel",
        "string",
        None,
        'Draft model. `null`: the pair\'s draft; `"ngram"`: n-gram lookup only; `"none"`: no draft (target only).',
        markdown=True,
        nullable=True,
    ),
    Setting(
        "device",
        "string",
        "auto",
        "Torch device: auto, cpu, cuda, cuda:N, mps.",
        pattern=r"auto|cpu|cuda|cuda:.*|mps",
        pattern_hint="one of auto, cpu, cuda, cuda:N, mps",
    ),
    Setting(
        "dtype",
        "string",
        "auto",
        "Model dtype: auto (the GGUF's quantized blocks on the CPU when available, bf16 on CUDA), gguf, "
        "float32, bfloat16, float16.",
        enum=("auto", "gguf", "float32", "bfloat16", "float16"),
    ),
    Setting(
        "packWeights",
        "string",
        "auto",
        "Pre-pack the model's linear layers for the CPU at load, so verifying several draft tokens costs what "
        "one does. `auto`: on the CPU when torch has oneDNN.",
        markdown=True,
        enum=("auto", "on", "off"),
    ),
    Setting(
        "threshold",
        "number",
        0.9,
        "Draft confidence threshold tau: drafting stops when the draft's top probability falls below it.",
        minimum=0,
        maximum=1,
        exclusive_minimum=True,
    ),
    Setting("kMin", "integer", 1, "Fewest tokens drafted per round (at most kMax).", minimum=1, maximum=16),
    Setting("kMax", "integer", 5, "Most tokens drafted per round.", minimum=1, maximum=16),
    Setting(
        "alternates",
        "integer",
        3,
        "Greedy decoding: the draft's runner-up tokens verified beside its chain in the same target forward, "
        "in slots that cost (almost) nothing. `0` = chain only. Output is unchanged either way.",
        markdown=True,
        minimum=0,
        maximum=8,
    ),
    Setting("maxNewTokens", "integer", 64, "Longest completion, in tokens.", minimum=1, maximum=2048),
    Setting(
        "contextWindow",
        "integer",
        256,
        "Prompt budget in tokens (prefix + suffix around the cursor).",
        minimum=32,
        maximum=32768,
    ),
    Setting(
        "prefixShare",
        "number",
        0.75,
        "Share of the context window given to the text before the cursor.",
        minimum=0.1,
        maximum=1,
    ),
    Setting(
        "contextBudget",
        "integer",
        0,
        "Tokens of other files (chunks of open documents, definitions of imported names) put before the "
        "current file in the prompt, on top of `contextWindow`. 0: the current file only.",
        markdown=True,
        minimum=0,
        maximum=8192,
    ),
    Setting(
        "contextOpenFiles",
        "boolean",
        True,
        "Let chunks of the other open (and recently edited) documents into the context.",
    ),
    Setting(
        "contextDefinitions",
        "boolean",
        True,
        "Let the definitions of imported names used near the cursor (read from open documents and the "
        "workspace folders) into the context.",
    ),
    Setting(
        "warmUp",
        "boolean",
        True,
        "Prefill the prompt in the background when a document opens, typing pauses or the cursor rests, "
        "so the next completion there starts from cached work.",
    ),
    Setting(
        "fimOrder",
        "string",
        "psm",
        "Fill-in-the-middle arrangement: psm (prefix, suffix, middle) or spm (suffix first).",
        enum=("psm", "spm"),
        in_editors=False,
    ),
    Setting(
        "relaxed",
        "boolean",
        False,
        "Relaxed acceptance (lossy: accepts draft tokens the target finds likely but would not pick). "
        "Off by default.",
        markdown=True,
    ),
    Setting(
        "debounceMs",
        "integer",
        150,
        "Wait this long after the last keystroke before decoding (server side).",
        minimum=0,
        maximum=5000,
        lsp_only=True,
    ),
    Setting(
        "multiline",
        "string",
        "auto",
        "Multi-line completions: decided from the syntax at the cursor (auto), always, or never.",
        enum=("auto", "always", "never"),
    ),
    # Advanced: accepted from any client, not offered in the editors' settings UIs.
    Setting("cacheDir", "string", None, "Model cache directory (null: the default).", nullable=True, in_editors=False),
    Setting("prefixReuse", "boolean", True, "Reuse the KV cache of a shared prompt prefix.", in_editors=False),
    Setting("completionCache", "boolean", True, "Answer typed-through completions from the cache.", in_editors=False),
    Setting(
        "draftMode",
        "string",
        "semi",
        "How a trained draft proposes: semi, ar or parallel.",
        enum=("semi", "ar", "parallel"),
        in_editors=False,
    ),
    Setting("temperature", "number", 0.0, "0: greedy (lossless); above 0: sampling.", minimum=0, maximum=2, in_editors=False),
    Setting("calibrate", "boolean", True, "Time the target's forwards at load to plan drafting.", in_editors=False),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def editor_settings() -> tuple[Setting, ...]:
    return tuple(s for s in SETTINGS if s.in_editors)


def validate(settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`settings` without the values this schema rejects, and one problem line per rejected value (the
    setting then falls back to its default). Names the schema does not know are passed on untouched:
    the service reports unknown settings itself."""
    kept: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in settings.items():
        setting = BY_NAME.get(key)
        problem = setting.problem(value) if setting is not None else None
        if problem is None:
            kept[key] = value
        else:
            problems.append(problem)
    return kept, problems


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
        f"-- Generated by `{GENERATOR} --write-nvim` from dspark_lsp/lsp/settings_schema.py: do not edit.",
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
