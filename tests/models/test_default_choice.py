"""The name `default` falls back to the previous default (the 0.5B) while the new default target (the
1.5B) is not prepared and the 0.5B is, with a note naming the command that switches; any explicit name
is taken as asked (models/default_choice.py). And where the default target's measured one-token forward is
slow, a note names the faster pair (speed_note)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.models import cache
from dspark_lsp.models.default_choice import PREVIOUS_DEFAULT, SLOW_ONE_TOKEN_MS, choose_pair, speed_note
from dspark_lsp.models.registry import DEFAULT_TARGET, get_model_spec, pair_for


def _prepare_fake(root: Path, name: str) -> None:
    """A cache entry `cache.is_ready` accepts: one file and a manifest naming the registry's source."""
    spec = get_model_spec(name)
    directory = cache.model_dir(root, name)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    cache.write_manifest(directory, cache.Manifest(name, spec.sha256, spec.gguf_filename, spec.size_bytes,
                                                   files=cache.list_files(directory)))


def test_the_default_is_served_when_it_is_prepared(tmp_path: Path) -> None:
    _prepare_fake(tmp_path, DEFAULT_TARGET)
    _prepare_fake(tmp_path, PREVIOUS_DEFAULT)
    choice = choose_pair("default", None, tmp_path)
    assert choice.pair == pair_for("default") and choice.pair.target == DEFAULT_TARGET
    assert choice.note is None


def test_an_upgrade_with_only_the_old_default_prepared_keeps_completing(tmp_path: Path) -> None:
    _prepare_fake(tmp_path, PREVIOUS_DEFAULT)
    choice = choose_pair("default", None, tmp_path)
    # The 0.5B's own pair, with the feature draft trained on it, not the 1.5B's n-gram pair retargeted.
    assert choice.pair == pair_for(PREVIOUS_DEFAULT)
    assert (choice.pair.target, choice.pair.draft) == ("qwen2.5-coder-0.5b", "dspark-feat-qwc05")
    assert choice.note is not None and "dspark-lsp models prepare" in choice.note and DEFAULT_TARGET in choice.note
    # A draft setting still applies to what is served.
    assert choose_pair("default", "ngram", tmp_path).pair == pair_for(PREVIOUS_DEFAULT, "ngram")


@pytest.mark.parametrize("model", ["qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b+0.5b", "/some/dir"])
def test_an_explicit_name_is_never_swapped(tmp_path: Path, model: str) -> None:
    _prepare_fake(tmp_path, PREVIOUS_DEFAULT)
    choice = choose_pair(model, None, tmp_path)
    assert choice.pair == pair_for(model) and choice.note is None


def test_with_nothing_prepared_the_default_is_asked_for(tmp_path: Path) -> None:
    # The load then fails with "run: dspark-lsp models prepare qwen2.5-coder-1.5b", the model to get.
    choice = choose_pair("default", None, tmp_path)
    assert choice.pair.target == DEFAULT_TARGET and choice.note is None


# ---------------------------------------------------------------------------------------------- speed note
def test_a_slow_cpu_gets_a_note_naming_the_faster_pair_and_how_to_get_it(tmp_path: Path) -> None:
    note = speed_note("default", DEFAULT_TARGET, 57.0, tmp_path)
    assert note is not None and "\n" not in note
    assert "57 ms" in note and PREVIOUS_DEFAULT in note
    assert f"dspark-lsp models prepare {PREVIOUS_DEFAULT}" in note  # not prepared here: the command too
    _prepare_fake(tmp_path, PREVIOUS_DEFAULT)
    ready = speed_note("default", DEFAULT_TARGET, 57.0, tmp_path)
    assert ready is not None and "models prepare" not in ready and f"set the model to {PREVIOUS_DEFAULT}" in ready


@pytest.mark.parametrize("ms", [None, 35.0, SLOW_ONE_TOKEN_MS])
def test_no_note_where_the_default_is_fast_enough_or_not_measured(tmp_path: Path, ms: float | None) -> None:
    assert speed_note("default", DEFAULT_TARGET, ms, tmp_path) is None


def test_no_note_for_an_explicit_name_or_another_target(tmp_path: Path) -> None:
    # Naming the 1.5B is how a user keeps it without the note; the 0.5B is the faster pair itself.
    assert speed_note(DEFAULT_TARGET, DEFAULT_TARGET, 90.0, tmp_path) is None
    assert speed_note("default", PREVIOUS_DEFAULT, 90.0, tmp_path) is None


def test_the_service_passes_its_measured_forward_to_the_note(tiny_models: tuple[Path, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """CompletionService.load gives speed_note the load's calibrated one-token cost and shows what it says."""
    from dspark_lsp.models import default_choice
    from dspark_lsp.service import CompletionService, ServiceConfig

    seen: list[tuple[str, str, float | None]] = []

    def note(model: str, target: str, one_token_ms: float | None, cache_dir: object = None) -> str:
        seen.append((model, target, one_token_ms))
        return "slow here"

    monkeypatch.setattr(default_choice, "speed_note", note)
    service = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", max_new_tokens=2))
    assert service.notice == "slow here"
    assert seen and seen[0][:2] == (str(tiny_models[0]), str(tiny_models[0]))
    assert seen[0][2] == service.verify_cost_ms[1] and seen[0][2] > 0
    uncalibrated = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", calibrate=False))
    assert uncalibrated.notice == "slow here" and seen[-1][2] is None  # a cost profile is not a measurement
