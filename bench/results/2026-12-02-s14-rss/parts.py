import ctypes, random, sys, threading, time, os
from pathlib import Path
import torch
torch.set_num_threads(2)
sys.path.insert(0, "/work/main")
libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena","ordblks","smblks","hblks","hblkhd","usmblks","fsmblks","uordblks","fordblks","keepcost")]
libc.mallinfo2.restype = MI2
libc.malloc_trim.argtypes = [ctypes.c_size_t]
def rss():
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
def st():
    libc.malloc_trim(0); mi = libc.mallinfo2(); return rss(), mi.uordblks / 2**20
from dspark_lsp.service import CompletionService, ServiceConfig
from dspark_lsp.prompt import build_fim_prompt
cfg = ServiceConfig(prefix_reuse=False)
svc = CompletionService.load(cfg)
files = [p for p in Path("/work/main/bench/corpus").rglob("*") if p.is_file() and p.suffix != ".md"]
src = {p: p.read_text() for p in files}
rng = random.Random(1)
dec = svc._decoder_text()
N = int(os.environ.get("N", "60"))
def run_in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn())); t.start(); t.join(); return out
# persistent worker like the server
import queue
q = queue.Queue()
def w():
    while True:
        f, box = q.get()
        try: box.append(f())
        except Exception as e: print("ERR", repr(e)[:200], flush=True); box.append(e)
threading.Thread(target=w, daemon=True).start()
def call(f):
    box = []; q.put((f, box))
    while not box: time.sleep(0.001)
    return box[0]
def phase(name, body):
    r0, u0 = st(); t0 = time.time()
    for i in range(N): call(body)
    call(lambda: libc.malloc_trim(0))
    r1, u1 = st()
    print(f"{name:24s} rss {r0:.1f}->{r1:.1f} ({r1-r0:+.1f})  uord {u0:.1f}->{u1:.1f} ({u1-u0:+.1f})  {time.time()-t0:.0f}s", flush=True)
def tok():
    p = rng.choice(files); t = src[p]; off = rng.randrange(len(t))
    fp = build_fim_prompt(t, off, svc.tokenizer, svc.fim, context_window=256, prefix_share=0.75)
    for k in range(1, 40): dec(fp.ids[-k:])
def fwd(L):
    def f():
        ids = torch.randint(0, 150000, (1, L() if callable(L) else L))
        with torch.inference_mode():
            svc.target(input_ids=ids, use_cache=True)
    return f
def gen(p, off):
    from dspark_lsp.contract import CompletionRequest
    return svc.complete(CompletionRequest(text=src[p], offset=off, path=str(p), doc_key=str(p)))
which = sys.argv[1:]
for _ in range(2):
  if "tok" in which: phase("tokenizer", tok)
  if "fixed" in which: phase("prefill fixed 200", fwd(200))
  if "var" in which: phase("prefill varied 33-320", fwd(lambda: rng.randint(33, 320)))
  if "short" in which: phase("forward varied 1-32", fwd(lambda: rng.randint(1, 32)))
  if "complete" in which:
    def c():
        p = rng.choice(files); return gen(p, rng.randrange(len(src[p])))
    phase("complete (nocache)", c)
