"""With the real 0.5B model, an imported function's definition in the context changes the completion:
the model calls it with the parameters the definition names."""

from __future__ import annotations

from typing import Any

import pytest

from dspark_lsp.context.types import ContextFile
from dspark_lsp.contract import CompletionRequest
from dspark_lsp.models import cache

MODEL = "qwen2.5-coder-0.5b"
MANIFEST = cache.model_dir(cache.cache_root(), MODEL) / "dspark-model.json"
pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not MANIFEST.is_file(), reason=f"real model not prepared; run: dspark-lsp models prepare {MODEL}"),
]

DOC = "from .net import open_channel\n\n\ndef start(config):\n    channel = open_channel("


@pytest.fixture(scope="module")
def service() -> Any:
    from dspark_lsp.service import CompletionService, ServiceConfig

    return CompletionService.load(ServiceConfig(model=MODEL, context_budget=256, completion_cache=False, max_new_tokens=24,
                                                multiline="never"))


def complete(service: Any, definition: str | None) -> str:
    context = (ContextFile("app/net.py", definition, "definition"),) if definition else ()
    req = CompletionRequest(DOC, len(DOC), path="app/main.py", prompt_path="app/main.py", repo_name="app",
                            context=context)
    return str(service.complete(req).text)


def test_an_imported_signature_changes_the_completion(service: Any) -> None:
    plain = complete(service, None)
    host_port = complete(service, "def open_channel(host: str, port: int) -> Channel:\n    \"\"\"Open a channel to host:port.\"\"\"\n")
    url = complete(service, "def open_channel(url: str, *, timeout: float) -> Channel:\n    \"\"\"Open a channel to url.\"\"\"\n")
    assert "host" not in plain and "port" not in plain
    assert "host" in host_port and "port" in host_port
    assert "url" in url and "host" not in url
