"""One editor's session: everything the handlers read and change, in one object.

The stdio server has one session; under --tcp every connection gets its own (tcp.py), so documents,
settings, models and counters never cross between editors. Handlers (handlers/*.py) are functions of
(session, params); router.py binds them to a session. `Session.close` is the one way a session ends,
whether the client said `exit` or the transport closed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspark_lsp.contract import as_result
from dspark_lsp.lsp.backend import Backend
from dspark_lsp.lsp.channel import Channel
from dspark_lsp.lsp.documents import DocumentStore
from dspark_lsp.lsp.executor import SerialExecutor
from dspark_lsp.lsp.handlers.feedback import Feedback
from dspark_lsp.lsp.loader import READY, ModelManager
from dspark_lsp.lsp.positions import Encoding
from dspark_lsp.lsp.project import ProjectContext
from dspark_lsp.lsp.settings import LspSettings
from dspark_lsp.lsp.warm import Warmer
from dspark_lsp.lsp.worker import CompletionWorker, Outcome

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from dspark_lsp.service import ServiceConfig

log = logging.getLogger(__name__)


@dataclass(eq=False)  # identity: sessions go in sets, and one equal to another is still another editor
class Session:
    # The pygls server this session answers through (messages, the client's capabilities, pulls).
    server: LanguageServer
    backend_factory: Callable[[], Backend]
    backend: Backend | None = None
    docs: DocumentStore = field(default_factory=DocumentStore)
    project: ProjectContext = field(default_factory=ProjectContext)  # other files for the prompt
    executor: SerialExecutor = field(default_factory=SerialExecutor)
    models: ModelManager | None = None
    worker: CompletionWorker | None = None
    # Shown / accepted completions as the editor reported them (handlers/feedback.py).
    feedback: Feedback = field(default_factory=Feedback)
    # Completion requests answered empty before the worker existed (before `initialized`): the
    # worker's counters cannot see them, dspark/stats adds them to its "not_ready" count.
    not_ready_early: int = 0
    # The last decoded completion's figures, repeated in dspark/status until the next one.
    last_speedup: float | None = None
    last_accepted_per_forward: float | None = None
    encoding: Encoding = "utf-16"
    init_options: dict[str, Any] = field(default_factory=dict)
    latest_section: dict[str, Any] | None = None
    lsp_settings: LspSettings = field(default_factory=LspSettings)
    config: ServiceConfig | None = None
    exit_code: int = 1  # exit without shutdown is an error per the LSP spec
    channel: Channel = field(init=False)
    warmer: Warmer = field(init=False)  # prefill ahead of requests (warm.py)
    _backend_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.channel = Channel(self.server)
        self.warmer = Warmer(self)

    def ensure_backend(self) -> Backend:
        """Resolve the service backend lazily: importing the real one costs torch's import time."""
        with self._backend_lock:  # the import may run on the worker while a config change arrives
            if self.backend is None:
                backend = self.backend_factory()
                self.models = ModelManager(backend, self.executor, self.channel)
                self.worker = CompletionWorker(self.models, self.executor)
                self.worker.on_done = self._report_completion
                self.backend = backend
            return self.backend

    def _report_completion(self, outcome: Outcome) -> None:
        """Refresh dspark/status with the last completion's figures (status bars show them)."""
        models = self.models
        if outcome.status != "ok" or models is None or models.state != READY:
            return
        result = as_result(outcome.result)
        if not result.from_cache:
            # The service's figure: tokens per target forward, i.e. how many times fewer target
            # forwards than the target alone (CompletionStats.from_decode); absent when nothing was
            # decoded. An answer from the typed-through cache ran no model: the bar keeps the last
            # decoded completion's figures.
            self.last_speedup = result.stats.speedup
            self.last_accepted_per_forward = result.stats.accepted_per_forward
        self.channel.status(
            READY,
            models.message,
            lastLatencyMs=round(outcome.latency_ms, 1),
            speedup=self.last_speedup,
            acceptedPerForward=self.last_accepted_per_forward,
        )

    def close(self, grace_s: float = 0.0) -> None:
        """End the session, however it ended (`exit`, the stream closing, the listener stopping): nothing
        more goes to the client, pending warm-ups and requests are dropped, the models released (a
        running model load is not waited for). `grace_s` > 0 then gives a running decode that long to
        see its cancel flag and the service to close cleanly; the stdio server waits (run_server's
        _finish ends the process if it is still inside a model call after this), a TCP session passes
        0 (the loop serves the other editors)."""
        self.channel.closed = True
        self.warmer.drop_all()
        self.project.close()
        if self.worker is not None:
            self.worker.cancel_all()
        if self.models is not None:
            self.models.shutdown()
        self.executor.shutdown(wait=False)
        if grace_s > 0:
            self.executor.join(timeout=grace_s)
