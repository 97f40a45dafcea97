"""The 0.5B target as the server loads it holds its weights once, compactly (issue 14's peak RSS):
no fp32 copy of any table, no second copy of the embedding, the untied embedding read from the GGUF.
Marked real_model; skipped when the model (with its GGUF) is not prepared or the kernel cannot build."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dspark_lsp.models import cache
from dspark_lsp.models.registry import QWEN_05B, get_model_spec

pytestmark = pytest.mark.real_model
TARGET = QWEN_05B.name  # the figures below are the 0.5B's

# Resident tensor bytes of the loaded 0.5B target, measured: 518 MiB (the Q8_0 head's codes and scales
# 146, the 24 layers' codes, scales and offsets 372, norms and biases). The token embedding (146 MiB more
# in the kernel's layout, 545 MiB in fp32) is not among them.
MAX_TENSOR_MIB = 560


@pytest.fixture(scope="module")
def target() -> Any:
    spec = get_model_spec(TARGET)
    root = cache.cache_root()
    if not cache.is_ready(cache.model_dir(root, TARGET), TARGET, spec.sha256):
        pytest.skip(f"run `dspark-lsp models prepare {TARGET}` first")
    from dspark_lsp.models.gguf_target import is_quantized
    from dspark_lsp.models.loader import load_causal_lm

    model, _tok = load_causal_lm(TARGET)  # what the service loads on a CPU (dtype auto)
    if not is_quantized(model):
        pytest.skip("the quantized path is unavailable here (no GGUF kept or no kernel): fp32 weights")
    return model


def test_small_target_holds_no_table_twice_and_none_in_fp32(target: Any) -> None:
    from dspark_lsp.quant.linear import QuantEmbedding

    config = target.config
    table = config.vocab_size * config.hidden_size
    storages: dict[int, tuple[int, torch.dtype, str]] = {}
    for name, t in [*target.named_parameters(), *target.named_buffers()]:
        s = t.untyped_storage()
        storages.setdefault(s.data_ptr(), (s.nbytes(), t.dtype, name))
    emb = target.get_input_embeddings()
    assert isinstance(emb, QuantEmbedding) and emb.rows is not None  # read from the file
    # No float storage of a table's size (the fp32 embedding or head would be 545 MB) ...
    floats = [n for b, dt, n in storages.values() if dt.is_floating_point and b >= table]
    assert not floats, floats
    # ... and one table-sized storage in all: the head's codes, one byte per weight.
    big = sorted(n for b, _dt, n in storages.values() if b >= table // 2)
    assert big == ["lm_head.codes"], big
    total_mib = sum(b for b, _dt, _n in storages.values()) / 2**20
    assert total_mib < MAX_TENSOR_MIB, f"{total_mib:.0f} MiB of tensors"
    # A lookup (through the row cache) gives what a fresh read and conversion of those rows gives.
    ids = torch.tensor([[0, 1, 151_643, config.vocab_size - 1]])
    again = emb.rows.expand(ids.reshape(-1).tolist())
    assert torch.equal(emb(ids).reshape(-1, config.hidden_size), again)
