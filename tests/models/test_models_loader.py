"""resolve_model / load_causal_lm / FIM token detection, on a tiny random model (no real weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.errors import ModelError, ModelNotPrepared
from dspark_lsp.models import cache
from dspark_lsp.models.fim import detect_fim_tokens
from dspark_lsp.models.loader import load_causal_lm, pick_dtype, resolve_model
from dspark_lsp.models.registry import KNOWN_MODELS


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dspark_lsp.testing.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, layers=1, hidden=16)


def fake_prepared(root: Path, name: str) -> Path:
    directory = cache.model_dir(root, name)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    spec = KNOWN_MODELS[name]
    cache.write_manifest(directory, cache.Manifest(name, spec.sha256, spec.gguf_filename, spec.size_bytes,
                                                   files={"config.json": 2}))
    return directory


def test_known_name_not_prepared_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(ModelNotPrepared) as info:
        resolve_model("qwen2.5-coder-1.5b", tmp_path)
    assert str(info.value) == (
        f"model qwen2.5-coder-1.5b is not prepared; run: dspark-lsp models prepare qwen2.5-coder-1.5b "
        f"--cache-dir {tmp_path}"
    )


def test_known_name_prepared_resolves_to_its_dir(tmp_path: Path) -> None:
    directory = fake_prepared(tmp_path, "qwen2.5-coder-0.5b")
    assert resolve_model("qwen2.5-coder-0.5b", tmp_path) == directory
    (directory / "config.json").write_text("{ truncated")  # size changed: no longer trusted
    with pytest.raises(ModelNotPrepared, match="incomplete: file config.json has 11 bytes, expected 2"):
        resolve_model("qwen2.5-coder-0.5b", tmp_path)


def test_local_dirs_and_hub_ids(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    with pytest.raises(ModelError, match="holds no config.json"):
        resolve_model(str(model))
    (model / "config.json").write_text("{}")
    assert resolve_model(str(model)) == model
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ModelError, match="is a file"):
        resolve_model(str(model / "config.json"))
    assert resolve_model("Qwen/Qwen2.5-Coder-0.5B") == "Qwen/Qwen2.5-Coder-0.5B"
    with pytest.raises(ModelError, match="empty model name"):
        resolve_model("  ")


def test_load_tiny_model_eval_no_grad(tiny_dir: Path) -> None:
    import torch

    model, tokenizer = load_causal_lm(str(tiny_dir))
    assert not model.training
    assert all(not p.requires_grad for p in model.parameters())
    # "auto" on CPU is fp32: bf16 verification is not bit-identical to one-token decoding.
    assert next(model.parameters()).dtype == torch.float32
    ids = tokenizer("def add(a, b):", return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] == model.config.vocab_size
    model16, _ = load_causal_lm(str(tiny_dir), dtype="bf16")
    assert next(model16.parameters()).dtype == torch.bfloat16


def test_unknown_dtype_is_a_user_error() -> None:
    with pytest.raises(ModelError, match="unknown dtype 'int3'"):
        pick_dtype("int3", "cpu")


def test_hub_id_without_network_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.models import loader

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    probes: list[float] = []

    def unreachable(timeout: float = 3.0) -> bool:
        probes.append(timeout)
        return False

    monkeypatch.setattr(loader, "_hub_reachable", unreachable)
    with pytest.raises(ModelError) as info:
        load_causal_lm("dspark-no-such-org/no-such-model")
    msg = str(info.value)
    assert msg.startswith("could not load model 'dspark-no-such-org/no-such-model': it is not a registry name")
    assert "huggingface.co cannot be reached" in msg and "\n" not in msg
    assert probes == [3.0]  # the network was probed once, never retried for ~45 s


def test_hub_offline_env_skips_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.models import loader

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loader, "_hub_reachable", lambda timeout=3.0: pytest.fail("probed the network"))
    with pytest.raises(ModelError, match="cannot be reached"):
        load_causal_lm("dspark-no-such-org/no-such-model")


def test_fim_tokens_detected(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    fim = detect_fim_tokens(tok)
    vocab = tok.get_vocab()
    assert (fim.prefix, fim.suffix, fim.middle) == ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    assert (fim.prefix_id, fim.suffix_id, fim.middle_id) == (
        vocab["<|fim_prefix|>"], vocab["<|fim_suffix|>"], vocab["<|fim_middle|>"])
    assert set(fim.eos_ids) == {vocab[t] for t in ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>")}
    assert len(fim.eos_ids) == len(set(fim.eos_ids))
    assert fim.prompt("a = ", "\nb") == "<|fim_prefix|>a = <|fim_suffix|>\nb<|fim_middle|>"
    # The markers must tokenize as single special tokens, not as text.
    assert tok(fim.prompt("x", "y")).input_ids[0] == fim.prefix_id


class _NoFimVocab:
    eos_token_id: int | None = 0

    def get_vocab(self) -> dict[str, int]:
        return {"<|endoftext|>": 0, "a": 1, "<|fim_prefix|>": 2}  # prefix alone is not FIM support


def test_tokenizer_without_fim_is_refused() -> None:
    with pytest.raises(ModelError, match="no fill-in-the-middle tokens"):
        detect_fim_tokens(_NoFimVocab())
