"""Decoding on another machine: our FIM prompt to an OpenAI-compatible server's `/v1/completions`.

Everything around the model is the local path's own code (dspark_lsp.service.CompletionService, the
pipeline this decoder sits in): the prompt (`build_fim_prompt`, same tokenizer, same budget), the scope
and stop rules of the syntax layer (cut while the text streams in, which closes the connection so the
server stops generating), the clean-up (`finish_text`), the typed-through completion cache and the
per-request records behind `dspark/stats`. Only the decode differs: it is the server's. This module
imports completion (what decoders share), never the service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from dspark_lsp.completion import Decoded, Prepared, Progress, ServiceConfig, finish_text, stop_ids
from dspark_lsp.contract import CompletionStats
from dspark_lsp.errors import UserError
from dspark_lsp.prompt import FimPrompt
from dspark_lsp.remote.client import BackendError, CompletionsClient
from dspark_lsp.remote.config import RemoteSettings

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
MAX_STOP_STRINGS = 4


class RemoteDecoder:
    """A completion.Decoder that asks an OpenAI-compatible server, streaming its text through the
    request's stop rules."""

    weights = "remote"
    target = None
    draft = None

    def __init__(self, remote: RemoteSettings, tokenizer: Any, client: CompletionsClient, *,
                 served_model: str | None) -> None:
        from dspark_lsp.models.fim import detect_fim_tokens

        self.remote = remote
        self.client = client
        self.served_model = served_model
        self._stop_ids = list(stop_ids(detect_fim_tokens(tokenizer)))
        # The same ids as text, for servers that send special tokens back as text: our own cut there.
        self._markers = [m for m in (_token_text(tokenizer, i) for i in self._stop_ids) if m]

    def configure(self, config: ServiceConfig) -> None:
        pass  # the settings are read per request; the server is the backend setting's (a change reloads)

    def close(self) -> None:
        pass

    def warm(self, fp: FimPrompt, config: ServiceConfig, cancel: threading.Event | None, *,
             keep_current: bool = False) -> int:
        return 0  # the server's prefix cache is its own

    def decode(self, prep: Prepared, config: ServiceConfig, decode_text: Callable[[list[int]], str], *,
               scheduler_state: tuple[float, ...] | None, cancel: threading.Event | None,
               on_text: Callable[[str], None] | None) -> Decoded:
        fp, tracker, scope = prep.fp, prep.tracker, prep.scope.value

        def on_chunk(text: str) -> bool:
            text, marker = self._before_marker(text)
            if on_text is not None:
                on_text(text)
            return marker or tracker.stop_index(text) is not None

        body = self.request_body(config, fp.text, scope, prep.req.max_new_tokens)
        answer = self.client.complete(body, cancel=cancel, on_text=on_chunk)
        full_text, _marker = self._before_marker(answer.text)
        text, cut = ("", None) if answer.cancelled else finish_text(
            tracker, full_text, prep.after, capped=answer.finish_reason == "length"
        )
        stats = CompletionStats(
            latency_ms=prep.elapsed_ms(),
            tokens=answer.completion_tokens,
            seconds=round(answer.total_ms / 1000, 4),
            prompt_tokens=answer.prompt_tokens if answer.prompt_tokens is not None else len(fp.ids),
            first_text_ms=answer.first_text_ms,
            finish_reason=answer.finish_reason,
            backend=self.remote.url,
            served_model=body.get("model"),
            draft="remote",
            weights=self.weights,
        )
        if answer.cancelled:
            stop_reason = "cancelled"
        elif cut is not None or answer.cut:
            stop_reason = "syntax"
        else:
            stop_reason = {"length": "max_new_tokens", "stop": "eos"}.get(answer.finish_reason or "", answer.finish_reason or "")
        return Decoded(text, [], stats, scope, answer.cancelled, stop_reason)

    def request_body(self, config: ServiceConfig, prompt: str, scope: str,
                     max_new_tokens: int | None = None) -> dict[str, Any]:
        """The `/v1/completions` body for one prompt (the integration check sends the same to vLLM)."""
        cfg, remote = config, self.remote
        stop = ["\n"] if scope == "single_line" else []
        # The API allows 4 stop strings (vLLM answers 400 to more). The markers after those are still
        # cut here (`_before_marker`), and with stopTokenIds the server stops on all of them.
        stop += [m for m in self._markers if m not in stop][: MAX_STOP_STRINGS - len(stop)]
        body: dict[str, Any] = {
            **remote.extra_body,
            "model": self._served_model_now(),
            "prompt": prompt,
            "max_tokens": max_new_tokens or cfg.max_new_tokens,
            "temperature": cfg.temperature,
            "stream": remote.stream,
            "stop": stop,
        }
        if remote.stream:
            body["stream_options"] = {"include_usage": True}
        if remote.stop_token_ids:
            body.setdefault("stop_token_ids", self._stop_ids)
        return body

    # ------------------------------------------------------------------------------------ helpers
    def _served_model_now(self) -> str:
        if self.served_model is None:
            # The server was down at load and no backend.model was given: ask again now.
            models = self.client.models(timeout_s=min(PROBE_TIMEOUT_S, self.remote.timeout_s))
            if not models:
                raise BackendError(f"{self.remote.url} serves no models (GET /v1/models is empty)")
            self.served_model = models[0]
        return self.served_model

    def _before_marker(self, text: str) -> tuple[str, bool]:
        """`text` up to the first FIM/end marker spelled out as text (the local decoder stops on their
        ids; a server that returns special tokens as text must stop there too)."""
        cut = min((i for i in (text.find(m) for m in self._markers) if i >= 0), default=-1)
        return (text, False) if cut < 0 else (text[:cut], True)


def load_remote(config: ServiceConfig, progress: Progress | None = None) -> tuple[Any, RemoteDecoder, str]:
    """(the tokenizer, the decoder, the service's description) for ``config``'s backend: the tokenizer of
    the model the prompt is built for, and the server asked once for what it serves (a server that does
    not answer yet is not fatal: each completion tries again and says why)."""
    remote = config.backend
    if remote is None:
        raise UserError("no backend configured")
    errs = config.problems()
    if errs:
        raise UserError("invalid configuration: " + "; ".join(errs))
    spec = remote.tokenizer or config.model
    if progress:
        progress(f"loading the tokenizer of {spec}", 0.1)
    tokenizer = load_tokenizer(spec, config.cache_dir)
    client = CompletionsClient(remote, remote.api_key())
    if progress:
        progress(f"asking {remote.url} for its models", 0.6)
    served = remote.model
    try:
        models = client.models(timeout_s=min(PROBE_TIMEOUT_S, remote.timeout_s))
    except BackendError as exc:
        # Not fatal: a team's server may be restarting; each completion tries again and says why.
        log.warning("the completion server is not answering yet: %s", exc)
    else:
        if served is None:
            if not models:
                raise UserError(f"{remote.url} serves no models (GET /v1/models is empty)")
            served = models[0]
        elif models and served not in models:
            raise UserError(f"{remote.url} serves {', '.join(models)}, not {served!r} (backend.model)")
    decoder = RemoteDecoder(remote, tokenizer, client, served_model=served)
    return tokenizer, decoder, f"{remote.url} {served or '?'}"


def load_tokenizer(spec: str, cache_dir: str | None) -> Any:
    """The tokenizer the local engine would use for `spec` (a pair or model name, a directory, an HF id),
    without the model's weights."""
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.models.registry import pair_for

    try:
        name = pair_for(spec, None).target
    except UserError:
        name = spec
    source = resolve_model(name, cache_dir)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    except Exception as exc:  # transformers raises OSError/ValueError/... for a missing or broken one
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load the tokenizer of {spec} for the prompt: {first} (backend.tokenizer)") from exc


def _token_text(tokenizer: Any, token_id: int) -> str:
    try:
        return str(tokenizer.convert_ids_to_tokens(int(token_id)) or "")
    except Exception:
        return ""
