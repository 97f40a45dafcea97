"""The `backend` setting: where completions come from when they are not computed on this machine.

    "backend": {"url": "http://gpu-box:8000", "model": "qwen-coder", "apiKeyEnv": "DSPARK_API_KEY",
                "timeoutMs": 10000}

or just the URL as a string. Absent, null or "local": the local engine (the default). Standard library
only: the settings are read by the language server before anything heavy is imported.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dspark_lsp.errors import UserError

# camelCase key in the setting -> field name
KEYS = {
    "url": "url",
    "model": "model",
    "apiKeyEnv": "api_key_env",
    "timeoutMs": "timeout_ms",
    "stream": "stream",
    "stopTokenIds": "stop_token_ids",
    "extraBody": "extra_body",
    "tokenizer": "tokenizer",
}
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 100, 600_000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Request fields we set ourselves; extraBody may not override them (a stream/prompt of its own would
# break the parsing or the prompt the rest of the service reasons about).
RESERVED = ("model", "prompt", "stream", "stream_options", "max_tokens", "stop", "temperature")


@dataclass(frozen=True)
class RemoteSettings:
    """An OpenAI-compatible completions server (vLLM, SGLang, TGI, llama-server, ...)."""

    url: str  # base URL: http(s)://host:port, with or without a trailing /v1
    model: str | None = None  # the served model name; None = the first one GET /v1/models lists
    api_key_env: str | None = None  # name of the environment variable holding the API key (Bearer)
    timeout_ms: int = 10_000  # one completion, connect to last token
    stream: bool = True
    # vLLM/SGLang's `stop_token_ids` extension: the FIM markers and end tokens end the completion on the
    # server as they end it locally (they are special tokens, so stop *strings* never see them). Servers
    # that refuse unknown fields need it off.
    stop_token_ids: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    # A local tokenizer for the prompt budget (model name, directory or HF id); None = the `model`
    # setting's, i.e. the same tokenizer the local engine would use.
    tokenizer: str | None = None

    def problems(self) -> list[str]:
        out: list[str] = []
        bad_url = url_problem(self.url) if isinstance(self.url, str) else "backend.url must be a string"
        if bad_url is not None:
            out.append(bad_url)
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            out.append("backend.model must be a non-empty string or null")
        if self.api_key_env is not None and (
            not isinstance(self.api_key_env, str) or not _ENV_NAME.fullmatch(self.api_key_env)
        ):
            out.append("backend.apiKeyEnv must be the name of an environment variable (letters, digits, _)")
        if (
            isinstance(self.timeout_ms, bool)
            or not isinstance(self.timeout_ms, int)
            or not MIN_TIMEOUT_MS <= self.timeout_ms <= MAX_TIMEOUT_MS
        ):
            out.append(f"backend.timeoutMs must be an integer in [{MIN_TIMEOUT_MS}, {MAX_TIMEOUT_MS}]")
        for name in ("stream", "stop_token_ids"):
            if not isinstance(getattr(self, name), bool):
                out.append(f"backend.{_camel(name)} must be true or false")
        if not isinstance(self.extra_body, dict):
            out.append("backend.extraBody must be an object")
        elif reserved := sorted(k for k in self.extra_body if k in RESERVED):
            out.append(f"backend.extraBody may not set {', '.join(reserved)} (the service sets them)")
        else:
            try:
                json.dumps(self.extra_body)
            except (TypeError, ValueError):
                out.append("backend.extraBody must hold JSON values only")
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str) or not self.tokenizer.strip()):
            out.append("backend.tokenizer must be a non-empty string or null")
        return out

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000

    def endpoint(self, name: str) -> str:
        """The URL of `/v1/<name>` on this server."""
        base = self.url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return f"{base}/{name}"

    def api_key(self) -> str | None:
        """The key from the environment; UserError when the variable named is not set."""
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise UserError(
                f"backend.apiKeyEnv names {self.api_key_env}, but that environment variable is not set "
                "in the language server's environment"
            )
        return value

    def describe(self) -> str:
        """For logs and the status: never the key itself."""
        return f"{self.url.rstrip('/')} ({self.model or 'its first model'})"


def url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        return f"backend.url {url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"backend.url must be an http:// or https:// URL with a host, got {url!r}"
    if parts.query or parts.fragment:
        return f"backend.url must not have a query or fragment, got {url!r}"
    return None


def _camel(name: str) -> str:
    return next((k for k, v in KEYS.items() if v == name), name)


def parse_backend(value: Any) -> tuple[RemoteSettings | None, list[str]]:
    """The `backend` setting's value -> (settings or None for the local engine, problems).

    An invalid value is reported and the local engine used, as for every other setting."""
    if value is None or value == "local":
        return None, []
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        return None, [f"dspark.backend must be an object, a URL or \"local\", got {_json(value)}; using the local engine"]
    problems: list[str] = []
    kwargs: dict[str, Any] = {}
    for key, item in value.items():
        name = KEYS.get(key)
        if name is None:
            problems.append(f"unknown backend setting {key!r} ignored")
        elif item is not None:
            kwargs[name] = item
    if "url" not in kwargs:
        return None, [*problems, "dspark.backend needs a url; using the local engine"]
    settings = RemoteSettings(**kwargs)
    errs = settings.problems()
    if errs:
        return None, [*problems, *(f"{e}; using the local engine" for e in errs)]
    return settings, problems


def backend_problems(value: object) -> list[str]:
    """The problems of the typed `backend` value a config holds (None, the local engine, is valid)."""
    if value is None:
        return []
    if isinstance(value, RemoteSettings):
        return value.problems()
    return ["backend must be RemoteSettings or None"]


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
