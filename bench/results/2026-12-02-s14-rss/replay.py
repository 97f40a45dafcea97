"""In-process replay of the soak's workload on CompletionService, sampling memory."""
import ctypes, gc, json, os, random, sys, threading, time, queue
from collections import Counter
from pathlib import Path
import torch
torch.set_num_threads(2)
sys.path.insert(0, "/work/main")
from dspark_lsp.service import CompletionService, ServiceConfig
from dspark_lsp.contract import CompletionRequest

OUT = sys.argv[1]
MINUTES = float(os.environ.get("MINUTES", "12"))
EVERY = int(os.environ.get("EVERY", "50"))
TM = os.environ.get("TM", "0") == "1"
libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena","ordblks","smblks","hblks","hblkhd","usmblks","fsmblks","uordblks","fordblks","keepcost")]
libc.mallinfo2.restype = MI2
libc.malloc_trim.argtypes = [ctypes.c_size_t]

def rss():
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
def anon():
    d = {}
    for l in open("/proc/self/smaps_rollup"):
        p = l.split()
        if p[0] in ("Anonymous:", "Rss:", "Private_Dirty:"): d[p[0][:-1]] = int(p[1]) / 1024
    return d

if TM:
    import tracemalloc; tracemalloc.start(12)

cfg = ServiceConfig()
if os.environ.get("NOPREFIX") == "1": cfg.prefix_reuse = False
if os.environ.get("NOCC") == "1": cfg.completion_cache = False
t0 = time.time()
svc = CompletionService.load(cfg)
print("loaded", round(time.time() - t0, 1), "s rss", rss(), flush=True)
if os.environ.get("NOROWS") == "1":
    import dspark_lsp.quant.file_rows as fr
    print([n for n in dir(fr)], flush=True)

files = [p for p in Path("/work/main/bench/corpus").rglob("*") if p.is_file() and p.suffix != ".md"]
src = {p: p.read_text() for p in files}
rng = random.Random(int(os.environ.get("SEED", "0")))

jobs: "queue.Queue" = queue.Queue()
def worker():
    while True:
        item = jobs.get()
        if item is None: return
        req, cancel, done = item
        try:
            r = svc.complete(req, cancel)
            done.append(r)
        except Exception as e:
            done.append(e)
        libc.malloc_trim(0)
        done.append("t")
th = threading.Thread(target=worker, daemon=True); th.start()

def tensors():
    n = b = 0
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor):
                n += 1; b += o.numel() * o.element_size()
        except Exception: pass
    return n, b / 2**20

out = open(OUT, "w")
base_types = None
snap0 = None
nreq = 0
stop_at = time.time() + MINUTES * 60
t_start = time.time()
def sample(tag=""):
    global base_types, snap0
    gc.collect()
    mi = libc.mallinfo2()
    types = Counter(type(o).__name__ for o in gc.get_objects())
    tn, tb = tensors()
    rec = {"t": round(time.time() - t_start, 1), "n": nreq, "rss": round(rss(), 1), **{k: round(v,1) for k,v in anon().items()},
           "arena": round(mi.arena/2**20,1), "hblkhd": round(mi.hblkhd/2**20,1), "uord": round(mi.uordblks/2**20,1),
           "ford": round(mi.fordblks/2**20,1), "tensors": tn, "tensor_mb": round(tb,1), "objs": sum(types.values())}
    if base_types is None: base_types = types
    else:
        diff = {k: types[k] - base_types.get(k, 0) for k in types}
        rec["type_growth"] = sorted(((v, k) for k, v in diff.items() if v), reverse=True)[:8]
    if TM:
        s = tracemalloc.take_snapshot()
        if snap0 is None: snap0 = s
        else:
            st = s.compare_to(snap0, "lineno")[:8]
            rec["tm"] = [(str(x.traceback[0]), round(x.size_diff/1024,1)) for x in st]
        rec["tm_total_mb"] = round(tracemalloc.get_traced_memory()[0]/2**20,1)
    out.write(json.dumps(rec) + "\n"); out.flush()
    print(rec["t"], rec["n"], "rss", rec["rss"], "arena", rec["arena"], "uord", rec["uord"], "ford", rec["ford"], "hblkhd", rec["hblkhd"], "tensors", tn, rec["tensor_mb"], rec.get("type_growth", "")[:4] if rec.get("type_growth") else "", flush=True)

sample()
open_docs = []
while time.time() < stop_at:
    p = rng.choice(files)
    text = src[p]
    lines = text.splitlines(keepends=True)
    uri = f"file://{p}"
    if uri not in open_docs:
        open_docs.append(uri)
        if len(open_docs) > 6:
            old = open_docs.pop(0); svc.forget(old)
    for _visit in range(rng.randint(1, 3)):
        i = rng.randrange(0, max(1, len(lines) - 6))
        nl = rng.randint(1, 6)
        start = sum(len(l) for l in lines[:i]); block = "".join(lines[i:i + nl])[:400]
        rest = text[start + len(block):]
        k = 0
        while k < len(block) and time.time() < stop_at:
            k += rng.randint(1, 4)
            k = min(k, len(block))
            cur = text[:start] + block[:k] + rest
            req = CompletionRequest(text=cur, offset=start + k, path=str(p), doc_key=uri)
            cancel = threading.Event(); done = []
            jobs.put((req, cancel, done))
            if rng.random() < 0.8:
                time.sleep(rng.uniform(0.05, 0.5)); cancel.set()
            while "t" not in done: time.sleep(0.005)
            nreq += 1
            if nreq % EVERY == 0: sample()
    if rng.random() < 0.4 and uri in open_docs:
        open_docs.remove(uri); svc.forget(uri)
sample()
jobs.put(None)
