import torch, time
from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.engine.kv import new_cache
model, _ = load_causal_lm("qwen2.5-coder-1.5b")
ids = torch.randint(0, 150000, (1, 256))
with torch.inference_mode():
    for _ in range(2):
        model(input_ids=ids, past_key_values=new_cache(model), logits_to_keep=1)
    # a second slice on top of 256 cached, as a prompt's second slice runs
    c = new_cache(model); model(input_ids=ids, past_key_values=c, logits_to_keep=1)
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(input_ids=ids, past_key_values=c, logits_to_keep=1)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
