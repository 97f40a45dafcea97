"""Issue 18: the editors' copies of the `backend` setting's rules agree with the server's.

The server reads `backend` in dspark_lsp/remote/config.py (not in the scalar settings schema). The VS Code
extension declares it as `dspark.backend.<field>` in package.json and checks it in src/settings.ts; the
Neovim plugin checks `settings.backend` in lua/dspark/config.lua. Both keep a copy of the field names, the
timeout range and the request fields extraBody may not set; this holds each copy against the server's,
and (with nvim) runs the plugin's check and the server's parser on the same values. The extension's own
unit tests (editors/vscode/test/settings.test.ts) run the same comparison from node.
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

from dspark_lsp.remote import config as remote
from dspark_lsp.remote.config import RemoteSettings, parse_backend

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "editors" / "vscode" / "package.json"
SETTINGS_TS = ROOT / "editors" / "vscode" / "src" / "settings.ts"
NVIM_PLUGIN = ROOT / "editors" / "nvim"
NVIM_CONFIG = NVIM_PLUGIN / "lua" / "dspark" / "config.lua"
DEFAULTS = {f.name: f.default for f in fields(RemoteSettings) if not callable(f.default_factory)}  # type: ignore[misc]

# Values the server takes or refuses, for the plugin's check.
CASES: list[Any] = [
    "http://gpu-box:8000",
    "gpu-box:8000",
    "local",
    {"url": "http://gpu-box:8000"},
    {"url": "https://gpu-box/v1", "model": "m", "apiKeyEnv": "DSPARK_KEY", "timeoutMs": 100},
    {"url": "ftp://h"},
    {"url": "http://"},
    {"url": "http:/h"},
    {"url": "http://h:99999"},
    {"url": "http://h:8x"},
    {"url": "http://h/v1?x"},
    {"url": "http://h#top"},
    {"url": "http://[::1]:8000/v1"},
    {"url": "HTTP://h:1/"},
    {"model": "m"},
    {"url": "http://h", "timeoutMs": 600000},
    {"url": "http://h", "timeoutMs": 600001},
    {"url": "http://h", "timeoutMs": 99},
    {"url": "http://h", "timeoutMs": 1000.5},
    {"url": "http://h", "apiKeyEnv": "1ABC"},
    {"url": "http://h", "apiKeyEnv": "my key"},
    {"url": "http://h", "stream": False, "stopTokenIds": False},
    {"url": "http://h", "stream": 1},
    {"url": "http://h", "extraBody": {"top_k": 1}},
    {"url": "http://h", "extraBody": {"max_tokens": 3}},
    {"url": "http://h", "extraBody": {"stream_options": {"x": 1}}},
    {"url": "http://h", "extraBody": "x"},
    {"url": "http://h", "tokenizer": "/models/tok"},
    {"url": "http://h", "model": 7},
    {"url": "http://h", "model": ""},
]


def _props() -> dict[str, dict[str, Any]]:
    props: dict[str, dict[str, Any]] = json.loads(PACKAGE.read_text(encoding="utf-8"))["contributes"][
        "configuration"
    ]["properties"]
    return {k.removeprefix("dspark.backend."): v for k, v in props.items() if k.startswith("dspark.backend.")}


def test_vscode_declares_every_backend_field_with_the_servers_defaults() -> None:
    props = _props()
    assert list(props) == list(remote.KEYS)
    field_of = remote.KEYS
    for key, prop in props.items():
        assert prop.get("description") or prop.get("markdownDescription"), (
            f"dspark.backend.{key} has no description"
        )
        server_default = DEFAULTS.get(field_of[key])
        if key == "extraBody":
            assert prop["type"] == "object" and prop["default"] == {}
        elif server_default is None or key == "url":
            # A string the settings UI leaves empty: the extension sends null (the server's default) for "".
            assert prop["type"] == "string" and prop["default"] == "", key
        else:
            assert prop["default"] == server_default, key
    timeout = props["timeoutMs"]
    assert (timeout["type"], timeout["minimum"], timeout["maximum"]) == (
        "integer",
        remote.MIN_TIMEOUT_MS,
        remote.MAX_TIMEOUT_MS,
    )
    assert re.fullmatch(props["apiKeyEnv"]["pattern"], "DSPARK_API_KEY") and not re.fullmatch(
        props["apiKeyEnv"]["pattern"], "sk-1"
    )
    url = re.compile(props["url"]["pattern"])
    for value in ("", "http://gpu-box:8000", "https://h/v1", "gpu-box:8000", "http:/h", "http://h?x"):
        assert bool(url.fullmatch(value)) == (value == "" or parse_backend(value)[0] is not None), value


def _ts_list(name: str, text: str) -> list[str]:
    match = re.search(rf"export const {name}[^=]*= \[([^\]]*)\]", text)
    assert match, f"{name} not found"
    return re.findall(r'"(\w+)"', match.group(1))


def test_vscode_settings_ts_has_the_servers_rules() -> None:
    text = SETTINGS_TS.read_text(encoding="utf-8")
    assert _ts_list("BACKEND_KEYS", text) == list(remote.KEYS)
    assert _ts_list("BACKEND_RESERVED", text) == list(remote.RESERVED)
    timeout = re.search(r"BACKEND_TIMEOUT_MS = \{ min: (\d+), max: (\d+), default: (\d+) \}", text)
    assert timeout, "BACKEND_TIMEOUT_MS not found"
    assert [int(x) for x in timeout.groups()] == [
        remote.MIN_TIMEOUT_MS,
        remote.MAX_TIMEOUT_MS,
        DEFAULTS["timeout_ms"],
    ]


def test_nvim_config_has_the_servers_rules() -> None:
    text = NVIM_CONFIG.read_text(encoding="utf-8")
    block = re.search(r"M\.BACKEND_FIELDS = \{(.*?)\n\}", text, re.DOTALL)
    assert block, "BACKEND_FIELDS not found"
    assert re.findall(r"^\s*(\w+) = \"", block.group(1), re.MULTILINE) == list(remote.KEYS)
    reserved = re.search(r"M\.BACKEND_RESERVED = \{([^}]*)\}", text)
    assert reserved and re.findall(r'"(\w+)"', reserved.group(1)) == list(remote.RESERVED)
    timeout = re.search(r"M\.BACKEND_TIMEOUT_MS = \{ min = (\d+), max = (\d+) \}", text)
    assert timeout and [int(x) for x in timeout.groups()] == [remote.MIN_TIMEOUT_MS, remote.MAX_TIMEOUT_MS]


@pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed")
def test_nvim_plugin_accepts_what_the_server_accepts(tmp_path: Path) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CASES))
    out = tmp_path / "out.json"
    script = tmp_path / "check.lua"
    script.write_text(
        f'vim.opt.runtimepath:append("{NVIM_PLUGIN}")\n'
        'local cfg = require("dspark.config")\n'
        f'local cases = vim.fn.json_decode(table.concat(vim.fn.readfile("{cases}"), "\\n"))\n'
        "local ok = {}\n"
        "for i, backend in ipairs(cases) do\n"
        "  local resolved = cfg.resolve({ settings = { backend = backend } })\n"
        "  ok[i] = resolved ~= nil\n"
        "end\n"
        f'vim.fn.writefile({{ vim.fn.json_encode(ok) }}, "{out}")\n'
        "vim.cmd('qall!')\n"
    )
    subprocess.run(
        ["nvim", "--headless", "-n", "-i", "NONE", "-u", "NONE", "-c", f"luafile {script}"],
        timeout=30,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    plugin = json.loads(out.read_text())
    for value, accepted in zip(CASES, plugin, strict=True):
        server = value == "local" or parse_backend(value)[0] is not None
        assert accepted == server, (
            f"{value!r}: the server {'accepts' if server else 'refuses'} it, the plugin does not"
        )
