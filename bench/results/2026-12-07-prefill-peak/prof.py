"""Where one 256-token prefill slice of the 1.5B (on 256 cached) spends its time: torch's profiler table."""
import torch
from torch.profiler import ProfilerActivity, profile

from dspark_lsp.engine.kv import new_cache
from dspark_lsp.models.loader import load_causal_lm

model, _ = load_causal_lm("qwen2.5-coder-1.5b")
ids = torch.randint(0, 150000, (1, 256))
with torch.inference_mode():
    for _ in range(2):
        model(input_ids=ids, past_key_values=new_cache(model), logits_to_keep=1)
    # a second slice on top of 256 cached, as a prompt's second slice runs
    c = new_cache(model)
    model(input_ids=ids, past_key_values=c, logits_to_keep=1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(input_ids=ids, past_key_values=c, logits_to_keep=1)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
