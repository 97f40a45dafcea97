"""The real-VS-Code end-to-end test (editors/vscode-e2e/run.sh) from pytest.

* A registry that does not answer is reported as a set-up failure outside the project (exit 75 and
  a line that says so), never as a pass and never as a project failure: run.sh with an empty install
  prefix and the npm registry pointed at a closed loopback port. Fast; runs wherever the Debian
  packages are present (run.sh would try apt-get first otherwise).
* The whole test — code-server, Chromium, the real default model — when DSPARK_VSCODE_E2E=1. CI runs
  run.sh directly (.ci/run), so the main pytest run does not pay for it twice.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "editors" / "vscode-e2e" / "run.sh"
EXTERNAL = 75


def _debian_tools_present() -> bool:
    return all(shutil.which(t) for t in ("chromium", "rg", "npm", "node")) and (
        Path("/usr/include/krb5.h").exists() or Path("/usr/include/krb5/krb5.h").exists()
    ) and Path("/usr/share/fonts/truetype/dejavu").is_dir()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused at once
    return port


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _debian_tools_present(), reason="chromium/ripgrep/libkrb5-dev/fonts or node not installed")
def test_unreachable_registry_is_an_outside_failure(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DSPARK_E2E_PREFIX": str(tmp_path / "prefix"),  # nothing installed: run.sh must ask the registry
        "DSPARK_E2E_ARTIFACTS": str(tmp_path / "artifacts"),
        "npm_config_registry": f"http://127.0.0.1:{_closed_port()}/",
        "npm_config_fetch_retries": "0",
        "npm_config_fetch_timeout": "5000",
        "npm_config_cache": str(tmp_path / "npm-cache"),  # an empty cache: no answer from a previous run
        "npm_config_prefer_online": "true",
    }
    proc = subprocess.run(["bash", str(RUN)], env=env, capture_output=True, text=True, timeout=110)
    out = proc.stdout + proc.stderr
    assert proc.returncode == EXTERNAL, out[-3000:]
    assert "SET-UP FAILED OUTSIDE THE PROJECT" in out and "npm registry" in out, out[-3000:]
    assert not (tmp_path / "prefix" / "node_modules").exists()


@pytest.mark.timeout(900)
@pytest.mark.real_model
@pytest.mark.skipif(os.environ.get("DSPARK_VSCODE_E2E") != "1", reason="set DSPARK_VSCODE_E2E=1 (CI runs run.sh itself)")
def test_real_vscode_shows_and_accepts_ghost_text(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    env = {**os.environ, "DSPARK_E2E_ARTIFACTS": str(artifacts)}
    proc = subprocess.run(["bash", str(RUN)], env=env, capture_output=True, text=True, timeout=880)
    out = proc.stdout + proc.stderr
    if proc.returncode == EXTERNAL:
        pytest.fail(f"set-up failed outside the project (exit 75):\n{out[-3000:]}")
    result = json.loads((artifacts / "result.json").read_text())
    assert proc.returncode == 0 and result["passed"], (result.get("failures"), out[-3000:])
    # run.sh's verdict is checked again from what it recorded.
    assert result["ghostText"].strip()
    line = result["acceptedLine"]
    assert line.startswith("    return fib") and result["ghostText"].split("\n")[0].strip() in line
    texts = [s["text"] for s in result["statusSeen"]]
    assert any("loading…" in t and "%" in t for t in texts), texts
    assert "×" in result["finalStatus"]["text"] and any(u in result["finalStatus"]["text"] for u in (" ms", " s")), texts
    for shot in ("1-models-ready.png", "2-ghost-text.png", "3-accepted.png"):
        assert (artifacts / shot).stat().st_size > 10_000, shot
