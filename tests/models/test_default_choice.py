"""The name `default` falls back to the previous default (the 0.5B) while the new default target (the
1.5B) is not prepared and the 0.5B is, with a note naming the command that switches; any explicit name
is taken as asked (models/default_choice.py). And where the default model's answers come slowly, a note names
the faster pair (slow_default_note, latency_note.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.models import cache
from dspark_lsp.models.default_choice import PREVIOUS_DEFAULT, choose_pair, slow_default_note
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



# ----------------------------------------------------------------------------------- slow answers' note
def test_the_slow_answers_note_names_the_faster_pair_and_how_to_get_it(tmp_path: Path) -> None:
    note = slow_default_note("default", DEFAULT_TARGET, tmp_path)
    assert note is not None
    text = note(563.4, 20)
    assert "\n" not in text and "563 ms" in text and "last 20" in text and PREVIOUS_DEFAULT in text
    assert f"dspark-lsp models prepare {PREVIOUS_DEFAULT}" in text  # not prepared here: the command too
    _prepare_fake(tmp_path, PREVIOUS_DEFAULT)
    ready = note(563.4, 20)  # checked when the note is due, not at load
    assert "models prepare" not in ready and f"set the model to {PREVIOUS_DEFAULT}" in ready


def test_no_slow_answers_note_for_an_explicit_name_or_another_target(tmp_path: Path) -> None:
    # Naming the 1.5B is how a user keeps it without the note; the 0.5B is the faster pair itself.
    assert slow_default_note(DEFAULT_TARGET, DEFAULT_TARGET, tmp_path) is None
    assert slow_default_note("default", PREVIOUS_DEFAULT, tmp_path) is None


def test_the_service_watches_its_answers_only_for_the_default_model(tiny_models: tuple[Path, Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CompletionService.load arms the watch where slow_default_note gives a note, and its answers feed it."""
    from dspark_lsp.contract import CompletionRequest
    from dspark_lsp.models import default_choice
    from dspark_lsp.service import CompletionService, ServiceConfig

    cfg = ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", max_new_tokens=2, completion_cache=False)
    assert CompletionService.load(cfg).slow_answers is None  # an explicit model: no watch
    monkeypatch.setattr(default_choice, "slow_default_note", lambda *a: lambda ms, n: f"slow: {ms:.0f} over {n}")
    service = CompletionService.load(cfg)
    assert service.slow_answers is not None
    service.slow_answers.bound_ms = 0.0  # every answer counts as slow, so the note comes due at the window
    text = "def f(x):\n    return x\n"
    for i in range(service.slow_answers.window):
        assert service.take_notice() is None
        doc = text + f"y{i} = "
        service.complete(CompletionRequest(text=doc, offset=len(doc), path="/w/a.py", doc_key="file:///w/a.py"))
    note = service.take_notice()
    assert note is not None and note.startswith("slow: ") and note.endswith(f"over {service.slow_answers.window}")
    assert service.take_notice() is None  # once
