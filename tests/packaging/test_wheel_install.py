"""A wheel installed with pip completes (issue 15: `pip install .` gave a package that could not).

Builds the wheel from this checkout, installs it with pip into a fresh venv, and from a directory
outside the checkout starts the installed `dspark-lsp --stdio` console script, speaks LSP to it
(initialize with tiny random models, didOpen, textDocument/completion) and gets an item.

The fresh venv reuses this environment's dependencies (torch, transformers, tree-sitter, pygls) through
a .pth line instead of downloading them again: `venv --system-site-packages` would expose the base
interpreter's site-packages, which do not hold them. A .pth path line adds that directory to sys.path
after the venv's own site-packages and does not run the .pth files inside it, so this checkout's
editable install (a .pth finder there) stays inactive: the test checks that dspark_lsp is imported
from the venv, not from the checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from wheel_testlib import build_wheel

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]




def make_venv(dest: Path) -> Path:
    venv.EnvBuilder(with_pip=False, clear=True).create(dest)
    py = dest / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "_dspark_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return py


class Lsp:
    """The smallest LSP client over a child's stdio: Content-Length frames, requests by id."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.w, self.r = proc, proc.stdin, proc.stdout
        self.next_id = 0
        self.notifications: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.w.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.w.flush()

    def read(self) -> dict[str, Any]:
        length = 0
        r: BinaryIO = self.r  # type: ignore[assignment]
        while True:
            line = r.readline()
            assert line, "the server closed its stdout"
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        msg: dict[str, Any] = json.loads(r.read(length))
        return msg

    def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        while True:
            msg = self.read()
            if msg.get("id") == rid and "method" not in msg:
                assert "error" not in msg, msg
                return msg.get("result")
            if "method" in msg and "id" in msg:  # a server->client request (progress create, config)
                self.send({"id": msg["id"], "result": None})
            elif "method" in msg:
                self.notifications.append(msg)

    def wait_status(self, state: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for n in self.notifications:
            if n["method"] == "dspark/status" and n["params"]["state"] == state:
                return n["params"]
        while time.monotonic() < deadline:
            msg = self.read()
            if "method" in msg and "id" in msg:
                self.send({"id": msg["id"], "result": None})
                continue
            self.notifications.append(msg)
            if msg.get("method") == "dspark/status":
                assert msg["params"]["state"] != "error", msg["params"]
                if msg["params"]["state"] == state:
                    return dict(msg["params"])
        raise AssertionError(f"no dspark/status {state!r} in {timeout} s: {self.notifications[-5:]}")


def test_installed_wheel_completes(tmp_path: Path) -> None:
    tiny = pytest.importorskip("dspark_lsp.testing.tiny")
    wheel = build_wheel(tmp_path / "wheel")
    py = make_venv(tmp_path / "venv")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=200,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "elsewhere"  # not the checkout: nothing of it can be found from the cwd
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSPARK_GRAMMARS_DIR")}
    # The installed package, not the checkout, and its grammars from inside itself (without them
    # grammars_dir() falls back to <site-packages>/grammars, which does not exist, and scopes come from
    # a heuristic: the scope alone would not tell).
    probe = (
        "import dspark_lsp\n"
        "from dspark_lsp.syntax import SyntaxDocument, detect_language\n"
        "from dspark_lsp.syntax.languages import grammars_dir\n"
        "text = 'def f(x):\\n    '\n"
        "print(dspark_lsp.__file__, grammars_dir(),"
        " SyntaxDocument(text, detect_language('a.py', None)).completion_scope(len(text)).value)\n"
    )
    where = subprocess.run([str(py), "-c", probe], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    module, grammars, scope = where.stdout.split()
    assert Path(module).is_relative_to(tmp_path / "venv"), module
    assert Path(grammars) == Path(module).parent / "grammars", grammars
    assert (Path(grammars) / "python" / "language.toml").is_file() and (Path(grammars) / "python" / "scope.scm").is_file()
    assert scope == "multi_line", where.stdout
    # The tiny models are built by this environment (the checkout's helper), the server is the wheel's.
    target, draft = tiny.build_tiny_models(tmp_path / "tiny")

    exe = tmp_path / "venv" / "bin" / "dspark-lsp"
    assert exe.is_file(), "the wheel installed no dspark-lsp console script"
    env["DSPARK_CACHE_DIR"] = str(tmp_path / "cache")
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [str(exe), "--stdio"], cwd=work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        )
    try:
        lsp = Lsp(proc)
        lsp.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": work.as_uri(),
                "capabilities": {},
                "initializationOptions": {
                    "model": str(target),
                    "draftModel": str(draft),
                    "device": "cpu",
                    "dtype": "float32",
                    "maxNewTokens": 8,
                    "debounceMs": 0,
                    "multiline": "always",
                    "calibrate": False,
                },
            },
        )
        lsp.send({"method": "initialized", "params": {}})
        text = "def add(a, b):\n    return a\n"
        uri = (work / "sample.py").as_uri()
        lsp.send({"method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
        lsp.wait_status("ready", timeout=180)
        result = lsp.request("textDocument/completion", {
            "textDocument": {"uri": uri},
            "position": {"line": 1, "character": len("    return a")},
            "context": {"triggerKind": 1},
        })
        items = result["items"] if isinstance(result, dict) else result
        assert items, f"the installed wheel gave no completion item (server log: {tmp_path / 'server.log'})"
        edit = items[0]["textEdit"]
        # The item re-types the word before the cursor ("a") and continues it (see handlers/completion.py).
        assert edit["newText"].startswith("a") and len(edit["newText"]) > 1, items[0]
        lsp.request("shutdown", None)
        lsp.send({"method": "exit"})
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
