# Per matrix kind: the 1.5B's products at 1 / 4 / 8 rows, int16 vs int8, one pass over all 141 matrices (DRAM-streamed as in a
# forward), 6 passes a path alternating. Run: DSPARK_KERNEL_MARCH=x86-64-v3 python products_by_kind.py
import sys, time, statistics, collections, torch
from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.quant.linear import QuantLinear, apply_act8
torch.set_num_threads(2)
model, _ = load_causal_lm("qwen2.5-coder-1.5b", dtype="gguf")
lins = [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]
print(len(lins), "quant linears; vnni", bool(torch.ops.dspark_q.act8_vnni()))
def key(n, m):
    return f"{n.split('.')[-1]}:kind{m.kind}"
for M in (1, 4, 8):
    tot = collections.defaultdict(lambda: collections.defaultdict(list))
    xs = {}
    for rep in range(6):
        for path in (("int16", "int8") if rep % 2 else ("int8", "int16")):
            apply_act8(path == "int8")
            for n, m in lins:
                x = xs.setdefault(m.in_features, torch.randn(M, m.in_features))
                t = time.perf_counter(); m(x); dt = time.perf_counter() - t
                tot[key(n, m)][path].append(dt)
    print(f"M={M}")
    s16 = s8 = 0
    for k, d in sorted(tot.items()):
        # per rep: total over the layers of that kind
        per = {p: sorted(sum(v[i::6] ) for i in range(6))[3] * 1e3 / 6 * 6 for p, v in d.items()}
        n16 = sum(d["int16"]) / 6 * 1e3; n8 = sum(d["int8"]) / 6 * 1e3
        s16 += n16; s8 += n8
        print(f"  {k:28s} int16 {n16:7.2f} ms  int8 {n8:7.2f} ms")
    print(f"  total int16 {s16:.1f} int8 {s8:.1f}")
