"""Every server setting, declared once: name, type, range, default, description.

This table is the only place a setting's range, choices or default is written. From it:

* `ServiceConfig` (service.py) takes its camelCase -> field map (`SERVICE_FIELDS`) and its checks
  (`config_problems`): a config built in Python (the CLI, the benchmarks) is held to the same bounds as
  one that came over LSP;
* the language server validates incoming settings (`validate`, in lsp/handlers/configuration.py; the
  LSP-only `enable` / `debounceMs` through lsp/settings.py's `LspSettings`);
* `python -m dspark_lsp.lsp.settings_schema --write-vscode --write-nvim` writes the editors' copies
  (editors/vscode/package.json's configuration, editors/nvim/lua/dspark/schema.lua), `--check` fails
  when they are stale.

Adding a setting means one `Setting` entry here and one `ServiceConfig` field named as the setting in
snake_case (`maxNewTokens` -> `max_new_tokens`); tests/lsp/test_settings_table.py fails when the two sets
differ. Then regenerate the editors' files. A setting offered in the editors also needs its line in
the VS Code extension's own checks (editors/vscode/src/settings.ts) and a row in the README's settings
table; tests/lsp/test_settings_schema.py holds both against this table.

Scalar settings are checked here in full. An object-valued setting (`backend`) names its own parser
(`parse`: JSON value -> typed value and problems) and the check of the typed value ServiceConfig holds
(`value_problems`); its fields are that parser's business (remote/config.py for `backend`).

Standard library only (and remote/config.py, which is too): the table is read by tools and by the
language server before anything imports torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from dspark_lsp.remote.config import backend_problems, parse_backend

Kind = Literal["boolean", "integer", "number", "string", "object"]
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
    hint: str = ""  # what a valid value is, in words, where the pattern or the object kind cannot say it
    non_empty: bool = False  # strings: "" is invalid
    # Validated by the LSP layer itself (LspSettings) rather than handed on to the service.
    lsp_only: bool = False
    # Offered by the editor clients (VS Code settings UI, Neovim's option check). The others are
    # advanced knobs a client can still send in initializationOptions.
    in_editors: bool = True
    # Object kind only: JSON value -> (typed value, problems; an invalid value gives the default), and
    # the problems of a typed value (empty when valid).
    parse: Callable[[Any], tuple[Any, list[str]]] | None = None
    value_problems: Callable[[Any], list[str]] | None = None

    def __post_init__(self) -> None:
        # A malformed entry fails at import, not when a user first sends the setting.
        is_object = self.kind == "object"
        if is_object != (self.parse is not None and self.value_problems is not None):
            raise ValueError(f"setting {self.name}: parse and value_problems go with the object kind, and only there")
        if is_object and self.in_editors:
            raise ValueError(f"setting {self.name}: the editors' generated files hold scalar settings only")

    @property
    def field_name(self) -> str:
        """The ServiceConfig (or LspSettings) field that holds it: the name in snake_case."""
        return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", self.name).lower()

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
        elif self.kind == "object":
            text = self.hint or "an object"
        elif self.pattern is not None:
            text = self.hint or f"a string matching {self.pattern}"
        else:
            text = "a non-empty string" if self.non_empty else "a string"
        return f"{text} or null" if self.nullable else text

    def check(self, value: Any) -> bool:
        """Whether `value` is valid. For scalars that is the JSON value itself; for the object kind it is
        the typed value `parse` makes of the JSON (what ServiceConfig holds)."""
        if value is None:
            return self.nullable
        if self.kind == "object":
            return self.value_problems is not None and not self.value_problems(value)
        if self.kind == "boolean":
            return isinstance(value, bool)
        if self.kind in ("integer", "number"):
            return self._number_ok(value)
        if not isinstance(value, str):
            return False
        if self.enum is not None:
            return value in self.enum
        if self.non_empty and not value:
            return False
        return self.pattern is None or re.fullmatch(self.pattern, value) is not None

    def _number_ok(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "integer" and not isinstance(value, int):
            return False
        if value != value:  # NaN
            return False
        if self.minimum is not None and (value <= self.minimum if self.exclusive_minimum else value < self.minimum):
            return False
        return self.maximum is None or value <= self.maximum

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
        "Target model: a pair name (`default`: Qwen2.5-Coder-1.5B; `qwen2.5-coder-0.5b`: about half the latency, "
        "fewer completions right), a known model name, a local directory or a Hugging Face id.",
        markdown=True,
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
        hint="one of auto, cpu, cuda, cuda:N, mps",
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
        "quickAnswerMs",
        "integer",
        200,
        "Completions asked while typing answer with the lines finished after this many milliseconds; the "
        "rest is decoded in the background and shown as you accept or type through the suggestion. 0: "
        "always wait for the whole completion. A completion asked by its keybinding always waits.",
        minimum=0,
        maximum=60000,
    ),
    Setting(
        "contextWindow",
        "integer",
        768,
        "Prompt budget in tokens (prefix + suffix around the cursor).",
        minimum=32,
        maximum=32768,
    ),
    Setting(
        "prefixShare",
        "number",
        0.9,
        "Share of the context window given to the text before the cursor.",
        minimum=0.1,
        maximum=1,
    ),
    Setting(
        "contextBudget",
        "integer",
        256,
        "Tokens of other files (chunks of open documents, definitions of imported names) put before the "
        "current file in the prompt, on top of `contextWindow`; what they leave unused widens the current "
        "file's window. 0: the current file only.",
        markdown=True,
        minimum=0,
        maximum=8192,
    ),
    Setting(
        "contextOpenFiles",
        "boolean",
        False,
        "Let chunks of the other open (and recently edited) documents into the context. Off by default: "
        "on the repository-level set they added no exact matches beside the definitions and cost edit "
        "similarity (docs/CONTEXT.md).",
    ),
    Setting(
        "contextDefinitions",
        "boolean",
        True,
        "Let the definitions of imported names used near the cursor (read from open documents and the "
        "workspace folders) into the context, in the languages `contextDefinitionLanguages` names.",
        markdown=True,
    ),
    Setting(
        "contextDefinitionLanguages",
        "string",
        "python,go",
        "Languages whose completions get imported definitions (comma-separated language ids, or `*` for "
        "every language with import queries: c, cpp, go, java, javascript, python, rust, tsx, typescript). "
        "Default python,go: measured on the repository-level set, definitions helped Python (and Go a "
        "little) and cost TypeScript; elsewhere the budget goes to the current file's window.",
        markdown=True,
        pattern=r"\*|[a-z]+( *, *[a-z]+)*",
        hint="comma-separated language ids, or *",
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
        "spm",
        "Fill-in-the-middle arrangement: spm (suffix first; with tokenHealing, the better completions and "
        "the cheaper keystrokes) or psm (prefix, suffix, middle). A backend that cannot heal gets psm.",
        enum=("psm", "spm"),
        in_editors=False,
    ),
    Setting(
        "tokenHealing",
        "boolean",
        True,
        "With fimOrder spm: leave the last token before the cursor out of the prompt and make the completion "
        "start by spelling it again, so that a cursor inside a word or after `(` or `.` reads as in training.",
        markdown=True,
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
    Setting("threads", "integer", 0, "CPU threads for the local engine: 0 = all cores, one fewer per core other "
            "programs keep busy (checked before each request); a number fixes it.", minimum=0, maximum=1024,
            in_editors=False),
    # The editors declare `backend`'s fields themselves (VS Code: dspark.backend.<field>; Neovim:
    # settings.backend), checked against remote/config.py by tests/clients/test_editor_backend_settings.py.
    Setting(
        "backend",
        "object",
        None,
        'Decode on an OpenAI-compatible server instead of this machine: its URL, or an object of backend '
        'fields (url, model, apiKeyEnv, timeoutMs, ...). `null` or `"local"`: the local engine.',
        markdown=True,
        nullable=True,
        hint="a server URL, an object of backend fields or \"local\"",
        in_editors=False,
        parse=parse_backend,
        value_problems=backend_problems,
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# What the completion service reads (ServiceConfig), and the names the LSP layer keeps for itself.
SERVICE_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS if not s.lsp_only)
SERVICE_FIELDS: dict[str, str] = {s.name: s.field_name for s in SERVICE_SETTINGS}
LSP_ONLY: frozenset[str] = frozenset(s.name for s in SETTINGS if s.lsp_only)


def editor_settings() -> tuple[Setting, ...]:
    return tuple(s for s in SETTINGS if s.in_editors)


def validate(settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`settings` without the values this schema rejects, and one problem line per rejected value (the
    setting then falls back to its default). Names the schema does not know are passed on untouched:
    the service reports unknown settings itself. So are object-valued settings: their own parser reads
    and reports them where the service applies them (in their fields' words, once)."""
    kept: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in settings.items():
        setting = BY_NAME.get(key)
        problem = setting.problem(value) if setting is not None and setting.kind != "object" else None
        if problem is None:
            kept[key] = value
        else:
            problems.append(problem)
    return kept, problems


def config_problems(config: object) -> list[str]:
    """Each service setting's value in `config` (a ServiceConfig: fields named `Setting.field_name`)
    against the table; one line per invalid value. Rules between settings are the config's own."""
    out: list[str] = []
    for s in SERVICE_SETTINGS:
        value = getattr(config, s.field_name)
        if value is None and s.nullable:
            continue
        if s.value_problems is not None:
            out.extend(s.value_problems(value))
        elif not s.check(value):
            out.append(f"{s.name} must be {s.expected()}")
    return out
