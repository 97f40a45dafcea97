"""One settings schema (dspark_lsp/settings_schema.py; the editor files' generator is
dspark_lsp/lsp/settings_schema.py), and everything that must agree with it.

Issue 15: ranges had been copied by hand and drifted (maxNewTokens 2048 vs 4096, contextWindow 32-32768
vs 16-131072, prefixShare from 0.1 vs 0, debounceMs <= 5000 vs 10000). Checked here:
* ServiceConfig / LspSettings: same defaults, and their validation accepts every bound and refuses one
  step outside it (ServiceConfig's checks are generated from the table since issue 34);
* editors/vscode/package.json `contributes.configuration`: exactly what the generator writes, entry by
  entry (names, types, ranges, defaults, descriptions), plus the client-only entries;
* editors/vscode/src/settings.ts: its defaults and range checks (its own copy, for the settings UI);
* editors/nvim/lua/dspark/schema.lua: exactly what the generator writes, and (with nvim) the plugin
  refusing out-of-range values;
* the server itself: an out-of-range value is reported with the schema's words and falls back.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.lsp import settings_schema as schema
from dspark_lsp.lsp.settings import LspSettings
from dspark_lsp.lsp.settings_schema import SETTINGS, Setting
from dspark_lsp.remote.config import KEYS as BACKEND_KEYS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "editors" / "vscode" / "package.json"
SETTINGS_TS = ROOT / "editors" / "vscode" / "src" / "settings.ts"
NVIM_SCHEMA = ROOT / "editors" / "nvim" / "lua" / "dspark" / "schema.lua"
NVIM_PLUGIN = ROOT / "editors" / "nvim"
REGEN = "python -m dspark_lsp.lsp.settings_schema --write-vscode --write-nvim"
# package.json entries that belong to the VS Code client alone (how to start the server, UI choices).
VSCODE_CLIENT_ONLY = {"serverPath", "pythonPath", "serverArgs", "completionItems", "trace.server"}
# The `backend` object's fields, declared by hand as dspark.backend.<field> (tests/clients/test_editor_backend_settings.py).
VSCODE_BACKEND = {f"backend.{key}" for key in BACKEND_KEYS}
SERVICE_SETTINGS = [s for s in SETTINGS if not s.lsp_only]
NUMERIC = [s for s in SETTINGS if s.kind in ("integer", "number")]
# ServiceConfig.problems has no check for these: over LSP the schema's validation is the only one.
NOT_CHECKED_BY_SERVICE = {"cacheDir"}


def step(s: Setting) -> float:
    return 1 if s.kind == "integer" else 0.01


def outside_values(s: Setting) -> list[Any]:
    """Values one step outside each bound, and of the wrong type."""
    out: list[Any] = []
    if s.minimum is not None:
        out.append(s.minimum if s.exclusive_minimum else s.minimum - step(s))
    if s.maximum is not None:
        out.append(s.maximum + step(s))
    if s.kind == "integer":
        out.append(float(s.default) + 0.5)  # type: ignore[arg-type]
    if s.enum is not None:
        out.append("surely-not-a-value")
    out.append([] if s.kind == "string" else "text")
    return out


def bound_values(s: Setting) -> list[Any]:
    """Valid values at each bound (the bound itself, or just above an exclusive minimum)."""
    out: list[Any] = [s.default]
    if s.minimum is not None:
        out.append(s.minimum + step(s) if s.exclusive_minimum else s.minimum)
    if s.maximum is not None:
        out.append(s.maximum)
    out.extend(s.enum or ())
    return out


# --------------------------------------------------------------------------- the server's own checks
def test_schema_names_are_the_servers_settings() -> None:
    from dspark_lsp.service import ServiceConfig

    assert {s.name for s in SERVICE_SETTINGS} == set(ServiceConfig.SETTINGS)
    assert {s.name for s in SETTINGS if s.lsp_only} == {"enable", "debounceMs"}


@pytest.mark.parametrize("s", SERVICE_SETTINGS, ids=lambda s: s.name)
def test_service_config_agrees_at_every_bound(s: Setting) -> None:
    from dspark_lsp.service import ServiceConfig

    field_name = ServiceConfig.SETTINGS[s.name]
    assert getattr(ServiceConfig(), field_name) == s.default, f"default of {s.name}"
    base: dict[str, Any] = {"k_max": 16} if s.name == "kMin" else {}
    for value in bound_values(s):
        assert s.check(value), (s.name, value)
        assert ServiceConfig(**base, **{field_name: value}).problems() == [], (s.name, value)
    for value in outside_values(s):
        assert not s.check(value), (s.name, value)
        if s.name not in NOT_CHECKED_BY_SERVICE:
            assert ServiceConfig(**base, **{field_name: value}).problems(), f"ServiceConfig accepts {s.name}={value!r}"


def test_service_enums_are_the_loaders() -> None:
    from dspark_lsp.models.loader import DTYPES
    from dspark_lsp.models.packing import PACK_MODES

    assert set(schema.BY_NAME["dtype"].enum or ()) == set(DTYPES)
    assert set(schema.BY_NAME["packWeights"].enum or ()) == set(PACK_MODES)


def test_lsp_settings_agree() -> None:
    defaults = {f.name: f.default for f in fields(LspSettings)}
    assert defaults == {"enable": schema.BY_NAME["enable"].default, "debounce_ms": schema.BY_NAME["debounceMs"].default}
    debounce = schema.BY_NAME["debounceMs"]
    for value in bound_values(debounce):
        assert LspSettings.from_settings({"debounceMs": value}) == (LspSettings(debounce_ms=int(value)), [])
    for value in outside_values(debounce):
        settings, problems = LspSettings.from_settings({"debounceMs": value})
        assert settings.debounce_ms == debounce.default and len(problems) == 1
        assert problems[0].startswith(f"dspark.debounceMs must be {debounce.expected()}, got ")


def test_validate_drops_what_the_schema_refuses() -> None:
    kept, problems = schema.validate(
        {"maxNewTokens": 4096, "contextWindow": 16, "prefixShare": 0.0, "threshold": 0.5, "somethingElse": 1}
    )
    assert kept == {"threshold": 0.5, "somethingElse": 1}  # unknown names are the service's to report
    assert problems == [
        "dspark.maxNewTokens must be an integer in [1, 2048], got 4096; using 64",
        "dspark.contextWindow must be an integer in [32, 32768], got 16; using 768",
        "dspark.prefixShare must be a number in [0.1, 1], got 0.0; using 0.9",
    ]


# ---------------------------------------------------------------------------------------- VS Code
def test_vscode_configuration_is_generated_from_the_schema() -> None:
    text = PACKAGE.read_text(encoding="utf-8")
    props: dict[str, Any] = json.loads(text)["contributes"]["configuration"]["properties"]
    names = {k.removeprefix("dspark.") for k in props}
    assert names == {s.name for s in schema.editor_settings()} | VSCODE_CLIENT_ONLY | VSCODE_BACKEND
    for s in schema.editor_settings():
        assert props[f"dspark.{s.name}"] == schema.vscode_property(s), f"dspark.{s.name} differs: run {REGEN}"
    assert schema.vscode_package_text(text) == text, f"package.json is not as generated: run {REGEN}"


def _ts_object(name: str, text: str) -> str:
    match = re.search(rf"const {name}[^=]*= (?:Object\.freeze\()?\{{(.*?)\n\}}", text, re.DOTALL)
    assert match, f"{name} not found in settings.ts"
    return match.group(1)


def test_vscode_settings_ts_agrees() -> None:
    """The extension validates settings itself (one warning per bad value in the UI): its defaults and
    ranges must be the server's."""
    text = SETTINGS_TS.read_text(encoding="utf-8")
    editor = {s.name: s for s in schema.editor_settings()}
    defaults = dict(re.findall(r"^\s*(\w+): (.+?),\s*$", _ts_object("DEFAULT_SETTINGS", text), re.MULTILINE))
    assert set(defaults) == set(editor)
    for name, literal in defaults.items():
        assert json.loads(literal) == editor[name].default, f"settings.ts default of {name}: {literal}"
    checks = _ts_object("CHECKS", text)
    for s in NUMERIC:
        if not s.in_editors:
            continue
        m = re.search(rf"^\s*{s.name}: \[inRange\(([^)]*)\), \"([^\"]*)\"\]", checks, re.MULTILINE)
        assert m, f"settings.ts has no inRange check for {s.name}"
        args = [a.strip() for a in m.group(1).split(",")]
        lo, hi, integer = float(args[0]), float(args[1]), args[2] == "true"
        open_low = len(args) > 3 and args[3] == "true"
        assert (lo, hi, integer, open_low) == (s.minimum, s.maximum, s.kind == "integer", s.exclusive_minimum), (
            f"settings.ts range of {s.name}: inRange({m.group(1)}) vs the schema's {s.expected()}"
        )
        assert m.group(2).startswith(s.expected()), f"settings.ts message for {s.name}: {m.group(2)!r}"
    for s in SETTINGS:
        if s.enum is not None and s.in_editors:
            listed = re.findall(r'"([\w]+)"', re.search(rf"^\s*{s.name}: \[(.*)\],$", checks, re.MULTILINE).group(1))  # type: ignore[union-attr]
            dtypes = re.search(r"const DTYPES[^=]*= \[([^\]]*)\]", text)
            values = set(re.findall(r'"(\w+)"', dtypes.group(1))) if s.name == "dtype" and dtypes else set(listed)
            assert values >= set(s.enum), f"settings.ts accepts fewer {s.name} values than the server"


# ----------------------------------------------------------------------------------------- Neovim
def test_nvim_schema_is_generated_from_the_schema() -> None:
    assert NVIM_SCHEMA.read_text(encoding="utf-8") == schema.nvim_schema_text(), f"schema.lua is stale: run {REGEN}"
    config = (NVIM_PLUGIN / "lua" / "dspark" / "config.lua").read_text(encoding="utf-8")
    assert 'require("dspark.schema")' in config


@pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed")
def test_nvim_plugin_uses_the_schema(tmp_path: Path) -> None:
    """Headless Neovim: the plugin's defaults and names are the schema's, and it refuses out of range."""
    out = tmp_path / "out.json"
    script = tmp_path / "check.lua"
    script.write_text(
        f'vim.opt.runtimepath:append("{NVIM_PLUGIN}")\n'
        'local cfg = require("dspark.config")\n'
        "local function problem(settings) local _, err = cfg.resolve({ settings = settings }); return err or vim.NIL end\n"
        "local r = {\n"
        "  defaults = cfg.SERVER_DEFAULTS, types = cfg.SERVER_SETTINGS,\n"
        "  big = problem({ maxNewTokens = 4096 }), top = problem({ maxNewTokens = 2048 }),\n"
        "  window = problem({ contextWindow = 16 }), share = problem({ prefixShare = 0 }),\n"
        "  debounce = problem({ debounceMs = 10000 }), tau = problem({ threshold = 0 }),\n"
        "  half = problem({ kMax = 2.5 }), dtype = problem({ dtype = \"int3\" }), pack = problem({ packWeights = \"on\" }),\n"
        "  draft = problem({ draftModel = vim.NIL }),\n"
        "}\n"
        f'local f = io.open("{out}", "w")\n'
        "f:write(vim.json.encode(r))\n"
        "f:close()\n"
        "vim.cmd('qall!')\n"
    )
    subprocess.run(
        ["nvim", "--headless", "-n", "-i", "NONE", "-u", "NONE", "-c", f"luafile {script}"],
        timeout=30,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    r = json.loads(out.read_text())
    editor = schema.editor_settings()
    # vim.json encodes vim.NIL as null: the defaults table round-trips to the schema's JSON defaults.
    assert r["defaults"] == {s.name: s.default for s in editor}
    assert r["types"] == {s.name: "number" if s.kind == "integer" else s.kind for s in editor}
    assert r["big"] == "server setting 'maxNewTokens' must be an integer in [1, 2048], got 4096"
    assert r["window"] == "server setting 'contextWindow' must be an integer in [32, 32768], got 16"
    assert r["share"] == "server setting 'prefixShare' must be a number in [0.1, 1], got 0"
    assert r["debounce"] == "server setting 'debounceMs' must be an integer in [0, 5000], got 10000"
    assert r["tau"] == "server setting 'threshold' must be a number in (0, 1], got 0"
    assert r["half"] == "server setting 'kMax' must be an integer in [1, 16], got 2.5"
    assert r["dtype"].startswith("server setting 'dtype' must be one of auto, gguf")
    assert r["top"] is None and r["pack"] is None and r["draft"] is None


# ------------------------------------------------------------------------------------- the server
def test_server_reports_out_of_range_settings_in_the_schemas_words() -> None:
    """apply_settings with a recording backend: what reaches the service config is only valid values,
    and the warning uses the schema's wording (and its fallback default)."""
    from types import SimpleNamespace

    from dspark_lsp.lsp.backend import Backend
    from dspark_lsp.lsp.handlers.configuration import apply_settings
    from dspark_lsp.lsp.server import create_server

    seen: list[dict[str, Any]] = []

    def config_from_settings(settings: dict[str, Any], base: Any) -> tuple[Any, list[str]]:
        seen.append(dict(settings))
        return SimpleNamespace(), []

    backend = Backend(config_from_settings=config_from_settings, make_request=dict, load=lambda c, p: None)  # type: ignore[arg-type,return-value]
    server = create_server(backend=backend).session
    shown: list[str] = []
    server.channel.show_message = lambda message, kind: shown.append(message)  # type: ignore[method-assign]
    server.ensure_backend()
    server.models = SimpleNamespace(apply=lambda config, enable: None)  # type: ignore[assignment]
    server.init_options = {"maxNewTokens": 4096, "debounceMs": 10000, "contextWindow": 2048, "enable": True}
    apply_settings(server, reason="test")
    assert seen[-1] == {"contextWindow": 2048, "enable": True}
    assert server.lsp_settings.debounce_ms == 150
    assert len(shown) == 1
    assert "dspark.maxNewTokens must be an integer in [1, 2048], got 4096; using 64" in shown[0]
    assert "dspark.debounceMs must be an integer in [0, 5000], got 10000; using 150" in shown[0]


def test_generator_check_mode_is_clean() -> None:
    assert schema.main(["--check"]) == 0


def test_readme_settings_table_agrees() -> None:
    """README's "Server settings" table: every setting has a row, with the schema's default and range."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Server settings") :]
    rows = [line for line in section.split("\n\n", 3)[2].splitlines() if line.startswith("| `")]
    for s in SETTINGS:
        row = next((r for r in rows if f"`{s.name}`" in r.split("|")[1]), None)
        assert row is not None, f"README's settings table has no row for {s.name}"
        cells = [c.strip() for c in row.split("|")[1:-1]]
        names = [n.strip(" `") for n in cells[0].split(" / ")]
        default = schema._json(s.default) if not isinstance(s.default, float) else schema._num(s.default)
        defaults = cells[1].split(" / ")  # one per name, or one shared by all ("`device` / `dtype`")
        shown = defaults[names.index(s.name)] if len(defaults) == len(names) else cells[1]
        assert f"`{default}`" in shown, f"README default of {s.name}: {cells[1]}"
        if s.minimum is not None and s.maximum is not None:
            lo = "(" if s.exclusive_minimum else "["
            assert f"{lo}{schema._num(s.minimum)}, {schema._num(s.maximum)}]" in cells[2], f"README range of {s.name}"
        for value in s.enum or ():
            assert f"`{value}`" in cells[2], f"README values of {s.name}: {cells[2]}"
