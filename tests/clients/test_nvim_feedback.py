"""Neovim reports what it drew and what the user accepted (dspark/stats counts them, handlers/feedback.py).

Runs the same headless driver as tests/clients/test_nvim_e2e.py (manual mode: trigger, next, prev, accept,
trigger again, dismiss) against the mock server, which logs what it receives.
"""

from __future__ import annotations

from pathlib import Path

from test_nvim_e2e import MOCK_TEXT, MOCK_TEXT2, mock_cmd, mock_log, nvim_param, pytestmark, run_nvim

__all__ = ["pytestmark"]  # the skip-without-nvim and timeout marks of the e2e module apply here too


@nvim_param
def test_shown_and_accepted_choices_are_reported(nvim: str, tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    r = run_nvim(nvim, tmp_path, mock_cmd(), settings={"maxNewTokens": 8}, env={"DSPARK_MOCK_LOG": str(log)})
    assert r["accepted"] is True
    received = mock_log(log)
    uri = (tmp_path / "sample.py").resolve().as_uri()
    feedback = [
        (m["method"], m["params"]["item"]["insertText"])
        for m in received
        if m.get("method") in ("textDocument/didShowCompletion", "dspark/didAcceptCompletion")
    ]
    # Drawn: the first choice, the second (next), the first again (prev); then accepted; then the
    # driver triggers once more (drawn) before it dismisses.
    assert feedback[:4] == [
        ("textDocument/didShowCompletion", MOCK_TEXT),
        ("textDocument/didShowCompletion", MOCK_TEXT2),
        ("textDocument/didShowCompletion", MOCK_TEXT),
        ("dspark/didAcceptCompletion", MOCK_TEXT),
    ], feedback
    assert all(m["params"]["uri"] == uri for m in received if m.get("method") == "dspark/didAcceptCompletion")
