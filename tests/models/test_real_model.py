"""End-to-end proof with the real default model (CI runs it after `dspark-lsp models prepare`).

`dspark-lsp complete` on the shipped example gives a sensible completion, and its `completion_ids` are
exactly what `model.generate(do_sample=False)` produces for the same prompt: the speculative decoder
(n-gram drafting by default) is lossless on the real model, through the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from dspark_lsp.models import cache
from dspark_lsp.models.registry import DEFAULT_TARGET

MODEL = DEFAULT_TARGET  # what `complete` runs without --model (the 1.5B since issue 32)
REPO = Path(__file__).resolve().parents[2]
MANIFEST = cache.model_dir(cache.cache_root(), MODEL) / "dspark-model.json"

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        not MANIFEST.is_file(),
        reason=f"real model not prepared ({MANIFEST} missing); run: dspark-lsp models prepare {MODEL}",
    ),
]


def test_complete_example_equals_generate() -> None:
    exe = Path(sys.executable).with_name("dspark-lsp")
    proc = subprocess.run(
        [str(exe), "complete", "examples/fib.py", "--line", "14", "--col", "8", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    obj = json.loads(lines[0])
    text, prompt, ids = obj["text"], obj["prompt"], obj["completion_ids"]

    # A sensible completion of the factorial loop body.
    assert "result" in text, text
    assert ids and obj["stats"]["tokens"] >= len(ids) and obj["stats"]["target_forwards"] >= 1
    source = (REPO / "examples" / "fib.py").read_text()
    cursor = source.index("+ 1):\n        ") + len("+ 1):\n        ")
    # Suffix first, token healing on (the defaults): the prompt ends before the text it left the model to spell.
    head = "<|fim_prefix|><|fim_suffix|>"
    assert prompt.startswith(head) and "<|fim_middle|>" in prompt and "    return result" in prompt
    shown_prefix = prompt.split("<|fim_middle|>", 1)[1]
    heal = source[:cursor][len(shown_prefix):]
    assert source[:cursor].startswith(shown_prefix) and heal

    from dspark_lsp.models.loader import load_causal_lm
    from dspark_lsp.models.token_bytes import token_table

    # The same resolution as the CLI's defaults (device "auto", dtype "auto").
    model: Any
    tokenizer: Any
    model, tokenizer = load_causal_lm(MODEL, device="auto", dtype="auto")
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    assert obj["stats"]["prompt_tokens"] == len(prompt_ids)
    device = next(model.parameters()).device
    # The healed tokens: the model's argmax among the tokens that agree with the text left to spell.
    table, rest, healed = token_table(tokenizer), heal.encode(), 0
    with torch.no_grad():
        while rest:
            logits = model(torch.tensor([prompt_ids + ids[:healed]], device=device)).logits[0, -1].float().cpu()
            assert int(torch.argmax(table.restrict(logits, rest))) == ids[healed]
            rest = table.advance(rest, ids[healed])
            healed += 1
        # Then the target's plain greedy decode.
        x = torch.tensor([prompt_ids + ids[:healed]], device=device)
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=len(ids) - healed)
    assert out[0, len(prompt_ids) + healed :].tolist() == ids[healed:]
    decoded = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert decoded.startswith(heal + text)
