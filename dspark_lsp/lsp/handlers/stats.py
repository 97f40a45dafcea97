"""dspark/stats: recent per-request figures (server side and the service's own)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dspark_lsp.lsp.handlers.feedback import feedback_of

if TYPE_CHECKING:
    from dspark_lsp.lsp.server import DSparkServer

log = logging.getLogger(__name__)

STATS_METHOD = "dspark/stats"


def collect(server: DSparkServer) -> dict[str, Any]:
    models = server.models
    out: dict[str, Any] = {
        "state": models.state if models is not None else "idle",
        "message": models.message if models is not None else "",
        "documents": len(server.docs),
        "debounceMs": server.lsp_settings.debounce_ms,
    }
    if server.worker is not None:
        out.update(server.worker.stats())
    counters = out.setdefault("counters", {})
    if server.not_ready_early:
        counters["not_ready"] = counters.get("not_ready", 0) + server.not_ready_early
    service = models.service if models is not None else None
    recent: list[dict[str, Any]] = []
    if service is not None:
        try:
            recent = list(service.recent_stats())
        except Exception:
            log.exception("recent_stats failed")
    out["service"] = recent
    # Shown / accepted completions as the editor reported them (handlers/feedback.py).
    out["feedback"] = feedback_of(server).snapshot()
    return out


def register(server: DSparkServer) -> None:
    @server.feature(STATS_METHOD)
    def stats(params: Any) -> dict[str, Any]:
        return collect(server)
