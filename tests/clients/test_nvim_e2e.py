"""Neovim, headless, with the plugin from editors/nvim loaded as the README says (runtimepath + setup).

Each test runs `nvim --headless` on a file with editors/nvim/test/e2e.lua, which triggers a completion
and writes what Neovim shows (the plugin's extmark virtual text) and does to a JSON file. The server is
the mock in editors/test/mock_lsp.py (fixed text, logs what it receives) or, in the last test, the real
`dspark-lsp --stdio` on tiny random models.

Neovim binaries: `nvim` on PATH (Debian's 0.7.2 here), plus any listed in $DSPARK_EXTRA_NVIM
(os.pathsep-separated), e.g. a newer one to check the 0.10+/0.11+ code paths.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim"
DRIVER = PLUGIN / "test" / "e2e.lua"
MOCK = ROOT / "editors" / "test" / "mock_lsp.py"
MOCK_TEXT = "return 42  # from dspark"
MOCK_TEXT2 = "return None  # second choice"


def _nvims() -> list[str]:
    found = [p for p in [shutil.which("nvim")] if p]
    for extra in os.environ.get("DSPARK_EXTRA_NVIM", "").split(os.pathsep):
        if extra and Path(extra).is_file() and extra not in found:
            found.append(extra)
    return found


NVIMS = _nvims()
pytestmark = [
    pytest.mark.skipif(not NVIMS, reason="nvim not installed (apt-get install neovim)"),
    pytest.mark.timeout(120),
]
nvim_param = pytest.mark.parametrize("nvim", NVIMS or ["nvim"])


def run_nvim(
    nvim: str,
    tmp_path: Path,
    cmd: list[str],
    text: str = "def answer():\n    \n",
    line: int = 2,
    mode: str = "manual",
    settings: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    timeout_ms: int = 20000,
) -> dict[str, Any]:
    """Runs the driver and returns its JSON result (fails the test with nvim's output if there is none)."""
    src = tmp_path / "sample.py"
    src.write_text(text)
    init = tmp_path / "init.lua"
    # The README's plain-runtimepath setup, word for word apart from the path.
    init.write_text(f'vim.opt.runtimepath:append("{PLUGIN}")\n')
    out = tmp_path / "result.json"
    full_env = {
        **os.environ,
        "DSPARK_E2E_OUT": str(out),
        "DSPARK_E2E_CMD": json.dumps(cmd),
        "DSPARK_E2E_FILE": str(src),
        "DSPARK_E2E_LINE": str(line),
        "DSPARK_E2E_MODE": mode,
        "DSPARK_E2E_SETTINGS": json.dumps(settings or {}),
        "DSPARK_E2E_TIMEOUT_MS": str(timeout_ms),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # the LSP log goes there, not into the user's home
        **(env or {}),
    }
    proc = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", str(init), "-c", f"luafile {DRIVER}"],
        env=full_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout_ms / 1000 * 3 + 30,
        stdin=subprocess.DEVNULL,
    )
    assert out.exists(), f"nvim wrote no result (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["ok"], result.get("error")
    return result


def mock_cmd() -> list[str]:
    return [sys.executable, str(MOCK)]


def mock_log(path: Path) -> list[dict[str, Any]]:
    # Whole lines only: a mock server still running may be appending one.
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


@nvim_param
def test_completion_shows_cycles_accepts_dismisses(nvim: str, tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    r = run_nvim(nvim, tmp_path, mock_cmd(), settings={"maxNewTokens": 8}, env={"DSPARK_MOCK_LOG": str(log)})
    assert r["filetype"] == "python"
    assert r["insert_mode"] == "i"
    # The server's text is drawn as virtual text at the cursor (row 1, after the 4-space indent).
    assert [(m["row"], m["col"], m["text"]) for m in r["shown"]] == [(1, 4, MOCK_TEXT)]
    assert r["suggestion"] == MOCK_TEXT
    assert [m["text"] for m in r["after_next"]] == [MOCK_TEXT2]
    assert [m["text"] for m in r["after_prev"]] == [MOCK_TEXT]
    assert r["accepted"] is True
    assert r["lines"] == ["def answer():", "    " + MOCK_TEXT]
    assert r["cursor"] == [2, 4 + len(MOCK_TEXT)]
    assert r["after_accept"] == 0
    assert (r["before_dismiss"], r["after_dismiss"]) == (1, 0)
    # dspark/status drives the statusline; dspark/stats reaches the server and back.
    assert r["status_after_completion"]["lastLatencyMs"] == 12.5
    assert r["statusline"] == "DSpark 13ms 2.3x"
    assert r["stats"]["result"]["served"] == 2
    # Toggling off reaches the server as a configuration change and stops requests client-side.
    assert r["toggled_to"] is False
    assert r["status_after_toggle"]["state"] == "disabled"
    assert r["trigger_when_off"] is False

    received = mock_log(log)
    init = next(m for m in received if m.get("method") == "initialize")
    assert init["params"]["initializationOptions"] == {"maxNewTokens": 8}
    assert init["params"]["capabilities"]["textDocument"]["inlineCompletion"] is not None
    asks = [m for m in received if m.get("method") == "textDocument/inlineCompletion"]
    assert asks[0]["params"]["position"] == {"line": 1, "character": 4}
    change = [m for m in received if m.get("method") == "workspace/didChangeConfiguration"]
    assert change[-1]["params"]["settings"]["dspark"] == {"maxNewTokens": 8, "enable": False}


@nvim_param
def test_typing_triggers_automatically_and_leaving_insert_clears(nvim: str, tmp_path: Path) -> None:
    r = run_nvim(nvim, tmp_path, mock_cmd(), mode="auto")
    assert r["lines"] == ["def answer():", "    #"]
    assert [(m["row"], m["col"], m["text"]) for m in r["auto_shown"]] == [(1, 5, MOCK_TEXT)]
    assert r["after_leave"] == 0


@nvim_param
def test_typed_prefix_is_not_repeated_and_multiline_uses_virtual_lines(nvim: str, tmp_path: Path) -> None:
    # The line holds "    ret"; the server's item starts 3 characters back and repeats "ret".
    r = run_nvim(
        nvim,
        tmp_path,
        mock_cmd(),
        text="def answer():\n    ret\n",
        env={"DSPARK_MOCK_TEXT": "return (\\n        42\\n    )", "DSPARK_MOCK_RANGE_BACK": "3"},
    )
    assert [(m["row"], m["col"], m["text"]) for m in r["shown"]] == [(1, 7, "urn (\n        42\n    )")]
    assert r["lines"] == ["def answer():", "    return (", "        42", "    )"]
    assert r["cursor"] == [4, 5]


@nvim_param
def test_utf16_position_after_non_ascii(nvim: str, tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    # "é" is 2 bytes, 1 UTF-16 unit; "😀" is 4 bytes, 2 UTF-16 units: the cursor at the end is character 12.
    r = run_nvim(
        nvim, tmp_path, mock_cmd(), text="s = 'é😀'\nx = 'é😀' \n", env={"DSPARK_MOCK_LOG": str(log)}
    )
    assert r["shown"][0]["text"] == MOCK_TEXT
    asks = [m for m in mock_log(log) if m.get("method") == "textDocument/inlineCompletion"]
    assert asks[0]["params"]["position"] == {
        "line": 1,
        "character": len("x = 'é😀' ".encode("utf-16-le")) // 2,
    }


@nvim_param
def test_missing_server_gives_one_clear_message(nvim: str, tmp_path: Path) -> None:
    r = run_nvim(nvim, tmp_path, ["/nonexistent/dspark-lsp", "--stdio"], timeout_ms=3000)
    assert r["status_after_start"]["state"] == "error"
    errors = [n["msg"] for n in r["notifications"] if n["level"] == 4]
    assert len(errors) == 1
    assert "not found" in errors[0] and "/nonexistent/dspark-lsp" in errors[0]
    assert "pip install dspark-lsp" in errors[0]


@nvim_param
def test_server_that_exits_is_reported(nvim: str, tmp_path: Path) -> None:
    # A Python without the package: the process starts, then exits with an import error.
    r = run_nvim(nvim, tmp_path, [sys.executable, "-c", "import sys; sys.exit(3)"], timeout_ms=5000)
    assert r["status_after_start"]["state"] == "error"
    assert any("exited with code 3" in n["msg"] for n in r["notifications"])


@nvim_param
def test_bad_setup_options_are_reported_not_raised(nvim: str, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = tmp_path / "bad.lua"
    script.write_text(
        f'vim.opt.runtimepath:append("{PLUGIN}")\n'
        "local msgs = {}\n"
        "vim.notify = function(m) table.insert(msgs, m) end\n"
        'local d = require("dspark")\n'
        'local a = d.setup({ filetypes = "python" })\n'
        'local b = d.setup({ settings = { threshold = "high" } })\n'
        "local c = d.setup({ colour = 1 })\n"
        f'local f = io.open("{out}", "w")\n'
        'f:write(tostring(a) .. tostring(b) .. tostring(c) .. "\\n" .. table.concat(msgs, "\\n"))\n'
        "f:close()\n"
        "vim.cmd('qall!')\n"
    )
    subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", "NONE", "-c", f"luafile {script}"],
        timeout=30,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    lines = out.read_text().splitlines()
    assert lines[0] == "falsefalsefalse"
    assert lines[1] == "dspark: setup: option 'filetypes' must be a table, got string"
    assert lines[2] == "dspark: setup: server setting 'threshold' must be a number, got string"
    assert lines[3] == "dspark: setup: unknown option 'colour'"


BACKEND = {
    "url": "http://gpu-box:8000",
    "model": "qwen2.5-coder-0.5b",
    "apiKeyEnv": "DSPARK_API_KEY",
    "timeoutMs": 2500,
}


@nvim_param
def test_backend_setting_is_forwarded_and_server_messages_are_shown(nvim: str, tmp_path: Path) -> None:
    """Issue 18: `settings = { backend = {...} }` reaches the server at start and on a change, and what the
    server refuses (window/showMessage) is a vim.notify at its level, not a line that scrolls away."""
    log = tmp_path / "mock.jsonl"
    refused = "DSpark: could not load the models: backend.apiKeyEnv names DSPARK_API_KEY, but that variable is not set"
    r = run_nvim(
        nvim,
        tmp_path,
        mock_cmd(),
        settings={"maxNewTokens": 8, "backend": {**BACKEND, "extraBody": {"top_k": 1}}},
        env={
            "DSPARK_MOCK_LOG": str(log),
            "DSPARK_MOCK_SHOW_MESSAGE": json.dumps({"type": 1, "message": refused}),
        },
    )
    received = mock_log(log)
    init = next(m for m in received if m.get("method") == "initialize")
    sent = {**BACKEND, "extraBody": {"top_k": 1}}
    assert init["params"]["initializationOptions"] == {"maxNewTokens": 8, "backend": sent}
    change = [m for m in received if m.get("method") == "workspace/didChangeConfiguration"]
    assert change[-1]["params"]["settings"]["dspark"] == {"maxNewTokens": 8, "backend": sent, "enable": False}
    shown = [n for n in r["notifications"] if "could not load" in n["msg"]]
    assert shown == [
        {
            "msg": "dspark: could not load the models: backend.apiKeyEnv names DSPARK_API_KEY, but that variable is not set",
            "level": 4,
        }
    ]


@nvim_param
def test_backend_setting_is_checked_at_setup(nvim: str, tmp_path: Path) -> None:
    """A bad `backend` is one clear message from setup() (which then refuses), in the server's terms; the
    forms the server takes pass, and an empty extraBody goes out as a JSON object, not a list."""
    out = tmp_path / "out.json"
    script = tmp_path / "backend.lua"
    script.write_text(
        f'vim.opt.runtimepath:append("{PLUGIN}")\n'
        'local cfg = require("dspark.config")\n'
        "local function problem(backend) local _, err = cfg.resolve({ settings = { backend = backend } }); return err or vim.NIL end\n"
        "local r = {\n"
        '  url = problem({ url = "gpu-box:8000" }), string = problem("gpu-box:8000"), port = problem({ url = "http://h:80x" }),\n'
        '  query = problem({ url = "http://h/v1?x=1" }), timeout = problem({ url = "http://h", timeoutMs = 50 }),\n'
        '  key = problem({ url = "http://h", apiKeyEnv = "sk-123" }), unknown = problem({ url = "http://h", colour = 1 }),\n'
        '  nourl = problem({ model = "m" }), number = problem(42), reserved = problem({ url = "http://h", extraBody = { prompt = "x" } }),\n'
        '  stream = problem({ url = "http://h", stream = "yes" }), list = problem({ url = "http://h", extraBody = { 1, 2 } }),\n'
        '  ok = { problem("http://gpu-box:8000"), problem("local"), problem(vim.NIL),\n'
        '         problem({ url = "https://[::1]:8000/v1", model = "m", apiKeyEnv = "KEY_1", timeoutMs = 600000, stream = false,\n'
        '                   stopTokenIds = false, extraBody = { top_k = 1 }, tokenizer = "/tok" }) },\n'
        '  payload = vim.json.encode(cfg.payload({ backend = { url = "http://h", extraBody = {} } })),\n'
        "}\n"
        f'local f = io.open("{out}", "w")\n'
        "f:write(vim.json.encode(r))\n"
        "f:close()\n"
        "vim.cmd('qall!')\n"
    )
    subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", "NONE", "-c", f"luafile {script}"],
        timeout=30,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    r = json.loads(out.read_text())
    assert (
        r["url"]
        == "server setting 'backend.url' must be an http:// or https:// URL with a host, got \"gpu-box:8000\""
    )
    assert (
        r["string"]
        == "server setting 'backend' must be an http:// or https:// URL with a host, got \"gpu-box:8000\""
    )
    assert r["port"].startswith("server setting 'backend.url' is not a URL")
    assert r["query"].startswith("server setting 'backend.url' must not have a query or fragment")
    assert (
        r["timeout"]
        == "server setting 'backend.timeoutMs' must be an integer in [100, 600000] (milliseconds), got 50"
    )
    assert r["key"].startswith(
        "server setting 'backend.apiKeyEnv' must be the name of an environment variable"
    )
    assert r["unknown"].startswith(
        "unknown backend field 'colour' (known: apiKeyEnv, extraBody, model, stopTokenIds"
    )
    assert r["nourl"] == "server setting 'backend' needs a url (leave `backend` out for the local engine)"
    assert r["number"].startswith("server setting 'backend' must be a table of backend fields")
    assert r["reserved"].startswith("server setting 'backend.extraBody' may not set prompt")
    assert r["stream"] == "server setting 'backend.stream' must be a boolean, got \"yes\""
    assert r["list"].startswith(
        "server setting 'backend.extraBody' must be a table of request fields, not a list"
    )
    assert r["ok"] == [None, None, None, None]
    assert json.loads(r["payload"]) == {"backend": {"url": "http://h", "extraBody": {}}}


def _real_server_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("dspark-lsp")
    if exe.exists():
        return [str(exe), "--stdio"]
    return [sys.executable, "-m", "dspark_lsp.lsp", "--stdio"]


@pytest.mark.timeout(300)
@nvim_param
def test_real_server_on_tiny_models(nvim: str, tmp_path: Path) -> None:
    tiny = pytest.importorskip("dspark_lsp.testing.tiny")
    pytest.importorskip("dspark_lsp.lsp.server")
    target, draft = tiny.build_tiny_models(tmp_path / "tiny")
    settings = {
        "model": str(target),
        "draftModel": str(draft),
        "device": "cpu",
        "dtype": "float32",
        "maxNewTokens": 8,
        "debounceMs": 0,
        "multiline": "always",
    }
    r = run_nvim(
        nvim,
        tmp_path,
        _real_server_cmd(),
        text="def add(a, b):\n    return a\n",
        settings=settings,
        timeout_ms=90000,
    )
    assert r["status_after_start"]["state"] == "ready", r["status_after_start"]
    items = r.get("items")
    assert items, f"the server returned no item: {r}"
    # Whatever the random models wrote, the editor shows exactly the server's first item at the cursor.
    first = items[0]["insertText"]
    text = first if isinstance(first, str) else first["value"]
    if text:
        # Neovim stores control characters in virtual text in caret notation (\x05 -> "^E"), and random
        # models write some.
        def caret(s: str) -> str:
            return "".join(f"^{chr(ord(c) + 64)}" if ord(c) < 32 and c not in "\n\t" else c for c in s)

        assert [m["text"] for m in r["shown"]] == [caret(text)]
        assert r["lines"][1] == "    return a" + text.split("\n")[0]
