"""What importing the package sets up in the process environment."""

from __future__ import annotations

import os
import subprocess
import sys

VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def _seen(env: dict[str, str]) -> str:
    code = f"import os, dspark_lsp; print(os.environ.get({VAR!r}, ''))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_import_caps_onednns_primitive_cache_unless_the_user_set_it() -> None:
    """The bf16 prefill GEMM built a oneDNN primitive per prompt length and kept up to 1,024 of them: a
    language server's memory grew 88.5 MB / 10 min in the soak. The package caps the cache at import,
    before torch first uses oneDNN, and keeps a value the user chose."""
    env = {k: v for k, v in os.environ.items() if k != VAR}
    assert _seen(env) == "8"
    assert _seen({**env, VAR: "64"}) == "64"
