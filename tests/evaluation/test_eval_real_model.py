"""`dspark-lsp eval` on the real 0.5B model (marked real_model; skipped when it is not prepared).

One seeded HumanEval hole through the real CLI: the report is complete, the service's completion is the
start of the model's raw output (the same greedy decode, cut), and `--rescore` re-cuts that raw output
into the very text the service gave.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_lsp.bench.prompts import find_humaneval_dir
from dspark_lsp.models import cache

MODEL = "qwen2.5-coder-0.5b"
REPO = Path(__file__).resolve().parents[2]
MANIFEST = cache.model_dir(cache.cache_root(), MODEL) / "dspark-model.json"

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not MANIFEST.is_file(), reason=f"real model not prepared ({MANIFEST} missing)"),
    pytest.mark.skipif(find_humaneval_dir("auto") is None, reason="HumanEval infilling data not reachable"),
]


def _eval(*argv: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("dspark-lsp")
    return subprocess.run(
        [str(exe), "eval", *argv], cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ}
    )


def test_eval_one_hole_on_the_real_model(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    args = ["--model", MODEL, "--sets", "single", "--limit", "1", "--seed", "3", "--llamacpp", "off", "--threads", "1"]
    proc = _eval(*args, "--max-new-tokens", "32", "--raw-max-tokens", "48", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    g = report["groups"]["humaneval-single"]
    assert g["problems"] == 1 and g["service_not_within_raw"] == 0
    assert set(g["methods"]) == {"service", "raw", "oracle_cut"}
    (p,) = report["problems"]
    a = p["attempts"]
    assert isinstance(a["service"]["passed"], bool) and a["service"]["latency_ms"] > 0
    assert a["raw"]["text"], "the real model writes something into a HumanEval hole"
    # The service shows a cut of the raw output (its budget, 32 tokens, is inside the raw one's 48).
    assert a["raw"]["text"].startswith(a["service"]["text"])
    proc = _eval("--rescore", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert again["problems"][0]["attempts"]["service"]["text"] == a["service"]["text"]
