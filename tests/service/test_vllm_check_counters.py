"""integrations/vllm/check.py's reading of vLLM's /metrics (issue 18): the speculative counters summed
over their labels, the engine's steps (one request at a time: the target's forwards), tokens per target
forward both ways, and the answer's token ids ending with the stop token vLLM names. Fast: no vLLM."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check_module() -> Any:
    spec = importlib.util.spec_from_file_location("vllm_check", ROOT / "integrations" / "vllm" / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 96.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.79e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 384.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 232.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 73.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 47.0
vllm:generation_tokens_total{engine="0",model_name="m"} 768.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 563.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 6000.0
"""


def test_counters_and_tokens_per_target_forward() -> None:
    check = check_module()
    after = check.parse_counters(METRICS)
    assert after["num_drafts"] == 96 and after["num_accepted_tokens"] == 232 and after["engine_steps"] == 563
    assert after["accepted_pos_0"] == 73 and after["accepted_pos_3"] == 47
    s = check.spec_summary({k: 0.0 for k in after}, after)
    assert s["tokens_per_target_forward"] == pytest.approx(1 + 232 / 96, abs=1e-3)  # vLLM's: drafted steps only
    assert s["tokens_per_engine_step"] == pytest.approx(768 / 563, abs=1e-3)  # every forward
    assert s["tokens_per_forward_all_steps"] == pytest.approx(768 / (768 - 232), abs=1e-3)


def test_answer_ids_end_with_the_stop_token() -> None:
    check = check_module()
    stops = [151643, 151645]
    assert check.answer_ids({"token_ids": [5, 6], "finish_reason": "stop", "stop_reason": 151643}, stops) == [5, 6, 151643]
    assert check.answer_ids({"token_ids": [5, 151643], "finish_reason": "stop", "stop_reason": 151643}, stops) == [5, 151643]
    assert check.answer_ids({"token_ids": [5, 6], "finish_reason": "length", "stop_reason": None}, stops) == [5, 6]
