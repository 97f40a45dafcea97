"""`--stdio` given twice (issue 15): tolerated with a warning; two transports are refused.

Both entry points (`dspark-lsp`, `python -m dspark_lsp.lsp`) read the transport through
`dspark_lsp.lsp.transport_args`; the VS Code extension must pass `--stdio` exactly once (a static check
of its sources here; the editor tests' mock server refuses a repeat, see editors/test/mock_lsp.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dspark_lsp.lsp.server as server_module
from dspark_lsp.cli import main as cli_main
from dspark_lsp.lsp.__main__ import main as lsp_main

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"
ENTRY_POINTS: list[Callable[[list[str]], int]] = [cli_main, lsp_main]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """run_server replaced by a recorder: the command line is judged, no server starts."""
    seen: list[dict[str, Any]] = []

    def fake_run_server(**kwargs: Any) -> int:
        seen.append(kwargs)
        return 0

    monkeypatch.setattr(server_module, "run_server", fake_run_server)
    return seen


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["dspark-lsp", "python -m dspark_lsp.lsp"])
def test_repeated_stdio_runs_one_stdio_server_with_a_warning(
    entry: Callable[[list[str]], int], calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry(["--stdio", "--stdio"]) == 0
    out, err = capsys.readouterr()
    assert [(c["stdio"], c["tcp"]) for c in calls] == [(True, None)]
    assert out == ""  # stdout is the protocol stream
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dspark-lsp: warning: --stdio given 2 times")


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["dspark-lsp", "python -m dspark_lsp.lsp"])
def test_single_stdio_is_silent(
    entry: Callable[[list[str]], int], calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry(["--stdio", "--log-level", "debug"]) == 0
    assert capsys.readouterr() == ("", "")
    assert calls == [{"stdio": True, "tcp": None, "log_level": "debug", "log_file": None}]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["dspark-lsp", "python -m dspark_lsp.lsp"])
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--tcp", "127.0.0.1:9001", "--tcp", "127.0.0.1:9002"], "--tcp given 2 times (127.0.0.1:9001, 127.0.0.1:9002)"),
        (["--stdio", "--tcp", "127.0.0.1:9001"], "not both"),
        (["--stdio", "--stdio", "--tcp", "127.0.0.1:9001"], "not both"),
    ],
)
def test_two_transports_are_refused_in_one_line(
    entry: Callable[[list[str]], int],
    calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needle: str,
) -> None:
    assert entry(argv) == 2
    out, err = capsys.readouterr()
    assert calls == [] and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dspark-lsp: error: ") and needle in lines[0]


def test_the_server_module_needs_a_transport(calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    assert lsp_main([]) == 2
    assert calls == [] and "choose a transport" in capsys.readouterr().err


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _messages(stream: bytes) -> list[dict[str, Any]]:
    """The JSON bodies of a stream of LSP frames (headers up to a blank line, then Content-Length bytes)."""
    out: list[dict[str, Any]] = []
    while stream:
        head, sep, rest = stream.partition(b"\r\n\r\n")
        assert sep, f"truncated frame: {stream[:200]!r}"
        length = int(re.search(rb"Content-Length: (\d+)", head, re.IGNORECASE).group(1))  # type: ignore[union-attr]
        out.append(json.loads(rest[:length]))
        stream = rest[length:]
    return out


@pytest.mark.timeout(90)
def test_real_server_started_with_stdio_twice_answers() -> None:
    """The command line an old extension produced: a session still works (no `initialized`, so no
    model is loaded)."""
    session = b"".join(
        _frame(m)
        for m in (
            {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}},
            {"id": 2, "method": "shutdown"},
            {"method": "exit"},
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "dspark_lsp.cli", "--stdio", "--stdio"],
        input=session,
        capture_output=True,
        timeout=80,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    bodies = _messages(proc.stdout)
    answers = {m["id"]: m for m in bodies if "id" in m and "method" not in m}
    assert answers[1]["result"]["serverInfo"]["name"] == "dspark-lsp"
    assert "result" in answers[2]
    assert b"--stdio given 2 times" in proc.stderr


# ------------------------------------------------------------------ the extension's argument list
def test_extension_lets_launch_args_carry_the_only_stdio() -> None:
    """vscode-languageclient appends `--stdio` to `args` when `transport` is TransportKind.stdio; the
    extension's launch args already end with one, so the server options must not name that transport."""
    extension = (VSCODE / "src" / "extension.ts").read_text()
    code = "\n".join(line for line in extension.splitlines() if not line.lstrip().startswith("//"))
    assert "TransportKind" not in code, "serverOptions with TransportKind.stdio adds a second --stdio"
    options = re.findall(r"const serverOptions: ServerOptions = (\{[^;]*\});", code)
    assert options == ["{ command: launch.command, args: launch.args }"]


def test_every_launch_ends_with_one_stdio() -> None:
    """resolveLaunch's four launches: extra args with any `--stdio` filtered out, then exactly one."""
    launch = (VSCODE / "src" / "launch.ts").read_text()
    assert 'const extra = cfg.serverArgs.filter((a) => a !== "--stdio");' in launch
    args = re.findall(r"args: (\[[^\]]*\])", launch)
    assert len(args) == 4, args
    for arg_list in args:
        assert arg_list.count('"--stdio"') == 1 and arg_list.endswith('"--stdio"]'), arg_list
        assert "cfg.serverArgs" not in arg_list  # only the filtered `extra`


def test_the_editor_mock_refuses_a_repeated_stdio() -> None:
    mock = ROOT / "editors" / "test" / "mock_lsp.py"
    twice = subprocess.run([sys.executable, str(mock), "--stdio", "--stdio"], input=b"", capture_output=True, timeout=30)
    assert twice.returncode == 2 and b"--stdio given 2 times" in twice.stderr
    once = subprocess.run([sys.executable, str(mock), "--stdio"], input=b"", capture_output=True, timeout=30)
    assert once.returncode == 0
