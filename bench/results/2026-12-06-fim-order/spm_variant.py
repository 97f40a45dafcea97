"""The other suffix-first arrangement, tried before giving up on suffix-first prompts: the suffix between
<|fim_prefix|><|fim_suffix|> and <|fim_middle|>, the prefix after <|fim_middle|> (the model then continues
the prefix; CodeLlama's and StarCoder's "SPM" form), instead of `fimOrder: spm`'s
<|fim_suffix|>suffix<|fim_prefix|>prefix<|fim_middle|>. Runs `dspark-lsp eval` with the service's prompt
builder re-arranged this way. Usage: python spm_variant.py EVAL-ARGS...   (repository root on PYTHONPATH)"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import dspark_lsp.service as service_module
from dspark_lsp.cli import main

original = service_module.build_fim_prompt


def suffix_first(text: str, offset: int, tokenizer: Any, fim: Any, **kw: Any) -> Any:
    kw["order"] = "psm"
    fp = original(text, offset, tokenizer, fim, **kw)
    h, pt, st = fp.context_tokens, fp.prefix_tokens, fp.suffix_tokens
    ids = fp.ids
    assert ids[h] == fim.prefix_id and ids[h + 1 + pt] == fim.suffix_id and ids[-1] == fim.middle_id
    prefix_ids, suffix_ids = ids[h + 1 : h + 1 + pt], ids[h + 2 + pt : h + 2 + pt + st]
    new_ids = [*ids[:h], fim.prefix_id, fim.suffix_id, *suffix_ids, fim.middle_id, *prefix_ids]
    head = fp.text[: len(fp.text) - len(f"{fim.prefix}{fp.prefix}{fim.suffix}{fp.suffix}{fim.middle}")]
    new_text = f"{head}{fim.prefix}{fim.suffix}{fp.suffix}{fim.middle}{fp.prefix}"
    return replace(fp, ids=new_ids, text=new_text)


service_module.build_fim_prompt = suffix_first  # type: ignore[assignment]
sys.exit(main(["eval", *sys.argv[1:]]))
