"""The name `default` falls back to the previous default (the 0.5B) while the new default target (the
1.5B) is not prepared and the 0.5B is, with a note naming the command that switches; any explicit name
is taken as asked (models/default_choice.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.models import cache
from dspark_lsp.models.default_choice import PREVIOUS_DEFAULT, choose_pair
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
