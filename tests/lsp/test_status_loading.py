"""dspark/status says "loading" with the load's progress while the models load (issue 15).

The load's steps (CompletionService.load's progress callback) reach dspark/status as `progress` in
[0, 1], so a status bar can show "loading… 60%" without work-done progress; a load that was superseded
or disabled meanwhile says nothing more.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dspark_lsp.lsp.loader import DISABLED, LOADING, READY, ModelManager


class FakeChannel:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.shown: list[tuple[str, Any]] = []

    def status(self, state: str, message: str = "", **figures: Any) -> None:
        # Channel.status drops None figures; so does this.
        self.sent.append({"state": state, "message": message, **{k: v for k, v in figures.items() if v is not None}})

    def progress_create(self) -> None:
        return None  # a client without work-done progress: dspark/status alone must carry it

    def show_message(self, message: str, kind: Any) -> None:
        self.shown.append((message, kind))


class Config:
    def needs_reload(self, other: Any) -> bool:
        return other is not self


class Service:
    notice: str | None = None

    def update_config(self, config: Any) -> None:
        pass

    def take_notice(self) -> str | None:
        return None

    def close(self) -> None:
        pass


class Backend:
    def __init__(self, steps: list[tuple[str, float | None]], gate: threading.Event | None = None,
                 notice: str | None = None) -> None:
        self.steps, self.gate, self.notice = steps, gate, notice

    def load(self, config: Any, progress: Any) -> Service:
        for i, (message, fraction) in enumerate(self.steps):
            progress(message, fraction)
            if i == 0 and self.gate is not None:
                self.gate.wait(10)
        service = Service()
        service.notice = self.notice
        return service


def test_a_services_notice_is_shown_once_as_a_warning() -> None:
    from lsprotocol import types

    channel = FakeChannel()
    with ThreadPoolExecutor(1) as ex:
        mm = ModelManager(Backend([("ready", 1.0)], notice="serving the 0.5B meanwhile"), ex, channel)  # type: ignore[arg-type]
        mm.apply(Config(), enable=True)
    assert channel.shown == [("DSpark: serving the 0.5B meanwhile", types.MessageType.Warning)]
    assert mm.state == READY
    quiet = FakeChannel()
    with ThreadPoolExecutor(1) as ex:
        ModelManager(Backend([("ready", 1.0)]), ex, quiet).apply(Config(), enable=True)  # type: ignore[arg-type]
    assert quiet.shown == []


def test_load_steps_reach_dspark_status_as_progress() -> None:
    channel = FakeChannel()
    steps: list[tuple[str, float | None]] = [
        ("loading target t", 0.0), ("loading draft d", 0.6), ("warming", None), ("almost", 1.7), ("ready", 1.0)
    ]
    with ThreadPoolExecutor(1) as ex:
        mm = ModelManager(Backend(steps), ex, channel)  # type: ignore[arg-type]
        mm.apply(Config(), enable=True)
    assert channel.sent[0] == {"state": LOADING, "message": "loading models"}
    loading = channel.sent[1:-1]
    assert [s["message"] for s in loading] == [m for m, _ in steps]
    assert all(s["state"] == LOADING for s in loading)
    # Fractions pass through, clamped into [0, 1]; an unknown one is no figure at all.
    assert [s.get("progress") for s in loading] == [0.0, 0.6, None, 1.0, 1.0]
    assert channel.sent[-1]["state"] == READY and "progress" not in channel.sent[-1]
    assert mm.state == READY


def test_a_disabled_load_says_nothing_more() -> None:
    channel = FakeChannel()
    gate = threading.Event()
    with ThreadPoolExecutor(1) as ex:
        mm = ModelManager(Backend([("loading target t", 0.0), ("loading draft d", 0.6)], gate), ex, channel)  # type: ignore[arg-type]
        mm.apply(Config(), enable=True)
        # Wait until the load reported its first step, then disable while it runs.
        for _ in range(1000):
            if any(s.get("progress") == 0.0 for s in channel.sent):
                break
            threading.Event().wait(0.01)
        mm.apply(Config(), enable=False)
        gate.set()
    states = [s["state"] for s in channel.sent]
    assert states[-1] == DISABLED, channel.sent
    # The step after the disable ("loading draft d") was not sent: it would have shown "loading" again.
    assert all(s.get("message") != "loading draft d" for s in channel.sent), channel.sent
    assert mm.state == DISABLED


def test_the_real_load_reports_ready_only_after_calibration(tiny_models: Any, monkeypatch: Any) -> None:
    """CompletionService.load's last step is "ready" at 1.0, sent after the calibration that __init__ runs
    (it times the target's forwards: seconds; "ready" before it left the bar at 100% meanwhile)."""
    import dspark_lsp.local_decoder as decoder_mod
    from dspark_lsp.service import CompletionService, ServiceConfig

    seen: list[tuple[str, float | None]] = []
    real = decoder_mod.calibrate_forwards

    def calibrate(target: Any) -> Any:
        seen.append(("<calibrating>", None))
        return real(target)

    monkeypatch.setattr(decoder_mod, "calibrate_forwards", calibrate)
    target, _ = tiny_models
    cfg = ServiceConfig(model=str(target), draft_model="ngram", max_new_tokens=3, context_window=64,
                        pack_weights="off", dtype="float32", device="cpu")
    CompletionService.load(cfg, progress=lambda msg, frac=None: seen.append((msg, frac)))
    names = [m for m, _ in seen]
    assert names.index("<calibrating>") < names.index("ready") == len(names) - 1
    assert seen[-1] == ("ready", 1.0)
    fracs = [f for _, f in seen if f is not None]
    assert fracs == sorted(fracs)  # the bar never goes back
