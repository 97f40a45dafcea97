"""Embedding rows read from the GGUF file (quant/file_rows.py): the in-memory table's values bit for bit,
for every supported type, through the row cache's hits, misses and evictions; and a loaded model whose
embedding is not its head holds no copy of the table (the memory issue 14 measured).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from quant_testlib import SUPPORTED, T, model_to_gguf, quantized_bytes, random_qwen2, tiny_config, write_gguf

from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import KernelUnavailable, load_kernel
from dspark_lsp.quant.file_rows import FileRows
from dspark_lsp.quant.gguf_file import GGUFError, open_gguf
from dspark_lsp.quant.linear import QuantEmbedding


@pytest.fixture(scope="module", autouse=True)
def _kernel() -> None:
    try:
        load_kernel()
    except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
        pytest.skip(f"the quantized kernel is unavailable here: {exc}")


def _table(tmp_path: Path, qtype: T, n: int = 300, k: int = 256, seed: int = 0) -> tuple[Path, np.ndarray]:
    raw = quantized_bytes(qtype, None, n, k, np.random.default_rng(seed))
    return write_gguf(tmp_path / f"table-{qtype.name}.gguf", [("token_embd.weight", raw, qtype)]), raw


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)  # compares -0.0 / NaN payloads too


@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda t: t.name)
def test_file_rows_are_the_in_memory_tables_values_bitwise(tmp_path: Path, qtype: T) -> None:
    path, raw = _table(tmp_path, qtype)
    info = open_gguf(path).tensors["token_embd.weight"]
    n, k = info.rows_cols
    memory = QuantEmbedding(blocks.pack_tensor(raw, int(qtype), n, k))
    small = QuantEmbedding(rows=FileRows(path, info, cache_rows=16))  # evicts constantly
    rng = np.random.default_rng(int(qtype))
    with torch.inference_mode():
        for size in (1, 3, 12, 16, 40, 300, 1, 5):  # over the cache's size too (read without caching)
            ids = torch.from_numpy(rng.integers(0, n, size)).reshape(1, size)
            for _ in range(2):  # the second time mostly from the cache
                assert torch.equal(_bits(small(ids)), _bits(memory(ids)))
        every = torch.arange(n).reshape(3, -1)  # 2-D ids keep their shape
        got = QuantEmbedding(rows=FileRows(path, info))(every)
        assert got.shape == (3, n // 3, k) and torch.equal(_bits(got), _bits(memory(every)))


def test_row_cache_filled_under_inference_mode_takes_new_rows_outside_it(tmp_path: Path) -> None:
    # The engine looks rows up under inference mode, transformers' generate under no_grad, in the same
    # table: its first lookup must not make the cache a tensor the other mode cannot write (issue 33).
    path, raw = _table(tmp_path, T.Q8_0)
    info = open_gguf(path).tensors["token_embd.weight"]
    n, k = info.rows_cols
    memory = QuantEmbedding(blocks.pack_tensor(raw, int(T.Q8_0), n, k))
    emb = QuantEmbedding(rows=FileRows(path, info, cache_rows=8))
    with torch.inference_mode():
        assert torch.equal(_bits(emb(torch.tensor([1, 2, 3]))), _bits(memory(torch.tensor([1, 2, 3]))))
    with torch.no_grad():  # rows not cached yet, then enough to evict the ones inference mode wrote
        for ids in (torch.tensor([4, 5]), torch.arange(10, 18), torch.tensor([1, 11])):
            assert torch.equal(_bits(emb(ids)), _bits(memory(ids)))
    with torch.inference_mode():
        assert torch.equal(_bits(emb(torch.tensor([2, 30]))), _bits(memory(torch.tensor([2, 30]))))


def test_file_rows_refuse_bad_ids_and_a_file_cut_after_loading(tmp_path: Path) -> None:
    path, _raw = _table(tmp_path, T.Q8_0)
    info = open_gguf(path).tensors["token_embd.weight"]
    emb = QuantEmbedding(rows=FileRows(path, info))
    with pytest.raises(IndexError):
        emb(torch.tensor([info.rows_cols[0]]))
    with pytest.raises(IndexError):
        emb(torch.tensor([-1]))
    clone = copy.deepcopy(emb)  # opens the file again (its own descriptor)
    assert torch.equal(clone(torch.tensor([3, 4])), emb(torch.tensor([3, 4])))
    with open(path, "r+b") as fh:
        fh.truncate(info.offset + 10 * (info.nbytes // info.rows_cols[0]))
    with pytest.raises(GGUFError, match="cut short"):
        emb(torch.tensor([200]))


def test_untied_embedding_is_not_held_in_memory(tmp_path: Path) -> None:
    """The loaded model holds no tensor the size of its embedding table (in fp32 or in codes): the table
    is read from the file, and the model's resident weights are the file's other tensors."""
    config = tiny_config(vocab=4096, hidden=64)
    path = tmp_path / "untied.gguf"
    model_to_gguf(path, random_qwen2(0, config), {"token_embd.weight": T.Q5_0, "output.weight": T.Q8_0})
    model, report = build_quantized_model(path, config)
    emb = model.model.embed_tokens
    assert isinstance(emb, QuantEmbedding) and emb.rows is not None
    table = config.vocab_size * config.hidden_size
    storages = {}
    for _name, t in [*model.named_parameters(), *model.named_buffers()]:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    for name, t in emb.named_buffers():
        assert t.numel() < table // 100, name
    # The head's codes (one byte per weight) are the only table-sized storage left; with the table in
    # memory as well there were two, and in fp32 a fourfold one.
    assert sorted(b for b in storages.values() if b >= table // 2) == [table]
    assert model.lm_head.codes.untyped_storage().nbytes() == table
    assert sum(storages.values()) < 2 * table
    assert report.file_bytes == open_gguf(path).tensors["token_embd.weight"].nbytes
    assert "read from the file" in report.summary()
