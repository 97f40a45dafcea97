"""dspark/stats: recent per-request figures (server side and the service's own)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

STATS_METHOD = "dspark/stats"


def collect(session: Session) -> dict[str, Any]:
    models = session.models
    out: dict[str, Any] = {
        "state": models.state if models is not None else "idle",
        "message": models.message if models is not None else "",
        "documents": len(session.docs),
        "debounceMs": session.lsp_settings.debounce_ms,
    }
    if session.worker is not None:
        out.update(session.worker.stats())
    counters = out.setdefault("counters", {})
    if session.not_ready_early:
        counters["not_ready"] = counters.get("not_ready", 0) + session.not_ready_early
    service = models.service if models is not None else None
    recent: list[dict[str, Any]] = []
    if service is not None:
        try:
            recent = list(service.recent_stats())
        except Exception:
            log.exception("recent_stats failed")
    out["service"] = recent
    # Shown / accepted completions as the editor reported them (handlers/feedback.py).
    out["feedback"] = session.feedback.snapshot()
    return out


def stats(session: Session, params: Any) -> dict[str, Any]:
    return collect(session)
