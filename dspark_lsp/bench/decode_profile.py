"""Where a decode loop's time goes, token by token: `python -m dspark_lsp.bench.decode_profile [--model M]`.

Runs the service's own decoder (``SpeculativeDecoder.generate``, called as `bench.run` calls it for
``target_only`` / ``dspark``) on a real FIM prompt, with timers wrapped around the decoder's existing
seams (its ``_prefill``, ``_round``, ``_propose``, ``_forward``, ``_accept``, ``_rollback``, ``_record``,
``_emit`` methods, replaced on the instance for the call and removed after; nothing in the engine
changes). A row per round (row 0: the prefill, which yields the first token; under ``target_only`` each
later round yields one token): its wall time, the time inside target forwards and outside them (drafting,
acceptance, cache rollback, scheduler and stats, emit, and the loop's own Python, the rest).

A second, profiled pass (torch.profiler, which inflates every op a little) splits each row's forwards
into the quantized products including the LM head (``dspark_q::*``, which in the native decode path is
the whole C++ layer: its attention and cache writes are loops inside that op, not ops of their own),
attention, KV writes, other ops, and what no op accounts for (Python and dispatch). In the same process,
an isolated one-token forward on a cache of its own, as long as the loop's middle token sees, is timed as
`bench.forward_profile` times it: once before every round (``paired_ms``, so each token's forward has a
twin taken under the same moment's load) and in a burst after each loop run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.bench.forward_profile import _bucket, profile_forward

# Seams of SpeculativeDecoder timed per row; each adds its time to the row's field of the same name
# (``_forward`` to ``forward_ms``; ``_prefill`` and ``_round`` open rows).
_PARTS = {"_forward": "forward_ms", "_propose": "draft_ms", "_accept": "accept_ms", "_rollback": "rollback_ms",
          "_record": "record_ms", "_emit": "emit_ms"}
_OP_PREFIXES = ("aten::", "dspark_q::", "mkldnn::")
_FORWARD_LABEL = "dprof.forward"
_ROW_LABEL = "dprof.row."


@dataclass
class Row:
    """One round of the loop (row 0: the prefill and its first token). Times in ms."""

    index: int
    tokens: int = 0  # tokens this row added to the output
    wall_ms: float = 0.0
    forward_ms: float = 0.0  # inside target forwards (``_forward``, padding and logits copy included)
    embed_ms: float = 0.0  # of which the input embedding lookup (a table read from its file may miss)
    draft_ms: float = 0.0
    accept_ms: float = 0.0
    rollback_ms: float = 0.0  # cropping the cache back after a verify
    record_ms: float = 0.0  # the scheduler's update and the stats
    emit_ms: float = 0.0
    # Filled by the profiled pass only: the forward's ops by bucket, and what no op accounts for.
    products_ms: float = 0.0
    attention_ms: float = 0.0
    kv_ms: float = 0.0
    other_ops_ms: float = 0.0
    forward_python_ms: float = 0.0
    # An isolated one-token forward on a cache of its own, timed just before this round (the pair arm;
    # not part of the row's wall): the same moment's load for both.
    paired_ms: float = 0.0

    @property
    def outside_ms(self) -> float:
        return self.draft_ms + self.accept_ms + self.rollback_ms + self.record_ms + self.emit_ms

    @property
    def loop_python_ms(self) -> float:
        """The row's time neither in a forward nor in a timed seam: the loop's own Python."""
        return max(0.0, self.wall_ms - self.forward_ms - self.outside_ms)

    def to_json(self) -> dict[str, Any]:
        d = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        d["outside_ms"] = round(self.outside_ms, 3)
        d["loop_python_ms"] = round(self.loop_python_ms, 3)
        return d


def process_state() -> dict[str, Any]:
    """RSS, threads and OpenMP settings of this process, now."""
    status: dict[str, str] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            status[key] = value.strip()
    except OSError:
        pass

    def mb(key: str) -> float | None:
        v = status.get(key)
        return round(int(v.split()[0]) / 1024, 1) if v else None

    prefill_bf16 = None
    try:
        prefill_bf16 = bool(torch.ops.dspark_q.prefill_bf16())
    except (AttributeError, RuntimeError):  # the quantized kernel is not loaded (an fp32 target)
        pass
    return {
        "rss_mb": mb("VmRSS"), "peak_rss_mb": mb("VmHWM"), "os_threads": int(status.get("Threads", 0) or 0),
        "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "env": {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                                               "ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")},
        "prefill_bf16": prefill_bf16,
    }


def _kv_state(cache: Any) -> dict[str, Any]:
    """The target cache's length and the capacity of its preallocated buffers (positions, MB)."""
    from dspark_lsp.engine.kv import cache_len

    layers = getattr(cache, "layers", []) or []
    caps = [int(layer._k.shape[-2]) for layer in layers if getattr(layer, "_k", None) is not None]
    nbytes = sum(t.numel() * t.element_size() for layer in layers
                 for t in (getattr(layer, "_k", None), getattr(layer, "_v", None)) if isinstance(t, torch.Tensor))
    return {"length": cache_len(cache), "capacity": max(caps) if caps else None, "buffers_mb": round(nbytes / 2**20, 1)}


class DecodeProbe:
    """Timers on one decoder's seams for the calls made while installed (``with probe.installed():``)."""

    def __init__(self, decoder: Any, *, labels: bool = False, paired: Callable[[], float] | None = None) -> None:
        self.decoder = decoder
        self.labels = labels  # torch.profiler labels around rows and forwards (the profiled pass)
        self.paired = paired  # ms of an isolated forward, run before each round when given
        self.rows: list[Row] = []
        self.after_prefill: dict[str, Any] = {}
        self.before_prefill: dict[str, Any] = {}
        self._row: Row | None = None
        self._row_label: Any = None

    @contextmanager
    def installed(self) -> Iterator[DecodeProbe]:
        names = ["_prefill", "_round", *_PARTS]
        for name in names:  # instance attributes shadow the class's methods; ``self._x(...)`` finds them
            setattr(self.decoder, name, self._wrap(name, getattr(self.decoder, name)))
        get_emb = getattr(self.decoder.target, "get_input_embeddings", None)
        emb = get_emb() if callable(get_emb) else None
        if emb is not None:  # nn.Module.__call__ calls ``self.forward``: an instance attribute wins
            emb.forward = self._timed_embed(emb.forward)
        try:
            yield self
        finally:
            self._close_row(time.perf_counter())
            for name in names:
                delattr(self.decoder, name)
            if emb is not None:
                del emb.forward

    def _timed_embed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            if self._row is not None:
                self._row.embed_ms += (time.perf_counter() - t0) * 1000
            return out

        return timed

    def _open_row(self, t: float) -> None:
        self._close_row(t)
        self._row = Row(len(self.rows))
        self.rows.append(self._row)
        self._row.wall_ms = -t * 1000  # closed by adding the end time
        if self.labels:
            self._row_label = torch.profiler.record_function(f"{_ROW_LABEL}{self._row.index}")
            self._row_label.__enter__()

    def _close_row(self, t: float) -> None:
        if self._row is not None:
            self._row.wall_ms += t * 1000
            self._row = None
        if self._row_label is not None:
            self._row_label.__exit__(None, None, None)
            self._row_label = None

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        part = _PARTS.get(name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            pair = self.paired() if name == "_round" and self.paired is not None else None
            if name == "_prefill":
                self.before_prefill = process_state()
            t0 = time.perf_counter()
            if name in ("_prefill", "_round"):
                self._open_row(t0)
            state: Any = args[1] if name in ("_emit", "_prefill") else None
            before = len(state.generated) if name == "_emit" else 0
            if name == "_forward" and self.labels:
                with torch.profiler.record_function(_FORWARD_LABEL):
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
            t1 = time.perf_counter()
            row = self._row
            if row is not None and part is not None:
                setattr(row, part, getattr(row, part) + (t1 - t0) * 1000)
            if name == "_emit" and row is not None:
                row.tokens += len(state.generated) - before
            if name == "_round":
                if pair is not None and row is not None:
                    row.paired_ms = pair
                self._close_row(t1)
            if name == "_prefill":
                after = process_state()
                rss0, rss1 = self.before_prefill.get("rss_mb"), after.get("rss_mb")
                self.after_prefill = {**after, "kv": _kv_state(state.cache),
                                      "rss_before_mb": rss0, "rss_added_mb": None if rss0 is None or rss1 is None
                                      else round(rss1 - rss0, 1)}
            return out

        return timed


def split_forwards(prof: Any, rows: list[Row]) -> None:
    """Add each op's self time inside a labelled forward to its row's buckets; the forward's rest is
    Python (and dispatch): ``forward_python_ms``."""
    by_index = {r.index: r for r in rows}
    for evt in prof.events():
        if not evt.name.startswith(_OP_PREFIXES):
            continue
        in_forward, row = False, None
        parent = evt.cpu_parent
        while parent is not None:
            if parent.name == _FORWARD_LABEL:
                in_forward = True
            elif parent.name.startswith(_ROW_LABEL):
                row = by_index.get(int(parent.name[len(_ROW_LABEL):]))
                break
            parent = parent.cpu_parent
        if not in_forward or row is None:
            continue
        field_name = {"matmul": "products_ms", "attention": "attention_ms", "kv_cache": "kv_ms"}.get(
            _bucket(evt.name), "other_ops_ms")
        setattr(row, field_name, getattr(row, field_name) + evt.self_cpu_time_total / 1000)
    for r in rows:
        r.forward_python_ms = max(0.0, r.forward_ms - r.products_ms - r.attention_ms - r.kv_ms - r.other_ops_ms)


@dataclass
class LoopRun:
    rows: list[Row]
    tokens: list[int]
    after_prefill: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)


KeyFactory = Callable[[], Callable[[list[int]], bool]]


def run_loop(decoder: Any, prompt: list[int], config: Any, *, draft: Any = None, eos: tuple[int, ...] = (),
             key_factory: KeyFactory | None = None, profiled: bool = False,
             paired: Callable[[], float] | None = None) -> LoopRun:
    """One ``decoder.generate`` call with the probe on; ``profiled``: under torch.profiler, rows split.
    ``key_factory``: a fresh is-key rule per call (the bench makes a syntax tracker per call);
    ``paired``: an isolated forward timed before each round."""
    probe = DecodeProbe(decoder, labels=profiled, paired=paired)
    is_key = key_factory() if key_factory is not None else None
    if draft is not None:
        draft.reset()
    with probe.installed():
        if profiled:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                res = decoder.generate(prompt, config=config, draft=draft, eos_ids=eos, is_key=is_key)
        else:
            res = decoder.generate(prompt, config=config, draft=draft, eos_ids=eos, is_key=is_key)
    if profiled:
        split_forwards(prof, probe.rows)
    st = res.stats
    rss_prefill = probe.after_prefill.get("rss_mb")
    rss_end = process_state()["rss_mb"]  # after the decode: what its rounds added on top of the prefill
    stats = {"t_prefill_ms": round(st.t_prefill * 1000, 1), "t_total_ms": round(st.t_total * 1000, 1),
             "target_forwards": st.target_forwards, "stop_reason": st.stop_reason,
             "rss_after_prefill_mb": rss_prefill, "rss_after_decode_mb": rss_end}
    return LoopRun(probe.rows, list(res.tokens), probe.after_prefill, stats)


class IsolatedForward:
    """One-token forwards on a ``context``-token cache of their own, as forward_profile times them
    (synthetic ids, the cache cropped back after each)."""

    def __init__(self, model: Any, context: int) -> None:
        from dspark_lsp.engine.kv import forward, new_cache

        self.model, self.context = model, context
        vocab = int(getattr(model.config, "vocab_size", 1000))
        self.ids = [(i * 7919) % min(vocab, 50_000) for i in range(context + 1)]
        self.cache = new_cache(model)
        forward(model, self.ids[:context], self.cache, keep=1)
        self()  # warm this shape once

    def __call__(self) -> float:
        from dspark_lsp.engine.kv import crop, forward

        t0 = time.perf_counter()
        forward(self.model, self.ids[self.context :], self.cache)
        ms = (time.perf_counter() - t0) * 1000
        crop(self.cache, self.context)
        return ms

    def median(self, repeats: int) -> float:
        return statistics.median(self() for _ in range(repeats))


def _median_rows(runs: list[list[Row]], keys: tuple[str, ...]) -> dict[str, float]:
    """Per-token medians over every decode row (row 0, the prefill, left out) of every run (``paired_ms``,
    one isolated forward per round, is not divided by the round's tokens)."""
    rows = [r for rows in runs for r in rows[1:] if r.tokens > 0]
    if not rows:
        return {}
    return {k: round(statistics.median(getattr(r, k) / (1 if k == "paired_ms" else r.tokens) for r in rows), 3)
            for k in keys}


_PLAIN_KEYS = ("wall_ms", "forward_ms", "paired_ms", "embed_ms", "outside_ms", "draft_ms", "accept_ms",
               "rollback_ms", "record_ms", "emit_ms", "loop_python_ms")
_PROF_KEYS = ("wall_ms", "forward_ms", "products_ms", "attention_ms", "kv_ms", "other_ops_ms",
              "forward_python_ms", "outside_ms", "loop_python_ms")


def profile_decode(decoder: Any, prompt: list[int], config: Any, *, draft: Any = None, eos: tuple[int, ...] = (),
                   key_factory: KeyFactory | None = None, repeats: int = 3, forward_repeats: int = 5
                   ) -> dict[str, Any]:
    """The report: ``repeats`` plain loop runs alternated with isolated forwards on a cache as long as the
    loop's middle token saw, then one profiled run of each."""
    model = decoder.target
    loop_runs: list[LoopRun] = []
    isolated: list[float] = []
    context = len(prompt) + max(1, config.max_new_tokens // 2)
    # The process's first prefill is the isolated arm's (the service's load runs none): what it leaves
    # resident (the kernel's kept prefill buffers, oneDNN's primitives, the KV buffers) shows here.
    at_start = process_state()
    iso_forward = IsolatedForward(model, context)
    after_first = process_state()
    for _ in range(repeats):
        loop_runs.append(run_loop(decoder, prompt, config, draft=draft, eos=eos, key_factory=key_factory,
                                  paired=iso_forward))
        isolated.append(iso_forward.median(forward_repeats))
    del iso_forward  # its cache, before the profiled pass
    prof_run = run_loop(decoder, prompt, config, draft=draft, eos=eos, key_factory=key_factory,
                        profiled=True)
    iso_prof = profile_forward(model, 1, context=context, repeats=forward_repeats)
    loop = _median_rows([r.rows for r in loop_runs], _PLAIN_KEYS)
    iso = statistics.median(isolated)
    pairs = [r.forward_ms / r.tokens / r.paired_ms for run in loop_runs for r in run.rows[1:]
             if r.tokens and r.paired_ms > 0]
    return {
        "prompt_tokens": len(prompt),
        "new_tokens": len(loop_runs[0].tokens),
        "context_for_isolated": context,
        "after_prefill": loop_runs[0].after_prefill,
        "first_prefill": {"rss_before_mb": at_start["rss_mb"], "rss_after_mb": after_first["rss_mb"],
                          "os_threads_before": at_start["os_threads"], "os_threads_after": after_first["os_threads"]},
        "loop_per_token_ms": loop,
        "isolated_forward_ms": round(iso, 3),
        "isolated_forward_runs_ms": [round(x, 3) for x in isolated],
        "loop_forward_over_isolated": round(loop["forward_ms"] / iso, 3) if loop and iso else None,
        "loop_wall_over_isolated": round(loop["wall_ms"] / iso, 3) if loop and iso else None,
        # Each round's forward over the isolated forward timed just before it: the tightest interleave.
        "paired_forward_ratio": round(statistics.median(pairs), 3) if pairs else None,
        "paired_isolated_ms": round(statistics.median(r.paired_ms for run in loop_runs for r in run.rows[1:]
                                                      if r.paired_ms > 0), 3) if pairs else None,
        "profiled_loop_per_token_ms": _median_rows([prof_run.rows], _PROF_KEYS),
        "profiled_isolated_forward_ms": iso_prof,
        "stats": [r.stats for r in loop_runs],
        "rows": [[row.to_json() for row in r.rows] for r in loop_runs],
        "profiled_rows": [row.to_json() for row in prof_run.rows],
        "end_state": process_state(),
    }


def _real_prompt(service: Any, prompt_tokens: int, index: int, corpus: Path) -> tuple[list[int], list[int], Any]:
    """A FIM prompt from the bench corpus (built as the bench builds it) of about ``prompt_tokens`` tokens:
    the ``index``-th hole whose prompt fills at least 90% of that window; its ids, the document outside
    the window (for the n-gram lookup) and a syntax tracker factory."""
    import functools

    from dspark_lsp.bench.prompts import corpus_prompts
    from dspark_lsp.prompt import build_fim_prompt, outside_window_ids
    from dspark_lsp.syntax import SyntaxDocument, detect_language

    found = 0
    for bp in corpus_prompts(corpus, 6, 0):
        fp = build_fim_prompt(bp.text, bp.offset, service.tokenizer, service.fim, context_window=prompt_tokens)
        if len(fp.ids) < 0.9 * prompt_tokens:
            continue
        if found == index:
            doc = SyntaxDocument(bp.text, bp.language or detect_language(bp.path, None))
            tracker = functools.partial(doc.generation, bp.offset, doc.completion_scope(bp.offset))
            return fp.ids, outside_window_ids(bp.text, bp.offset, fp, service.tokenizer), tracker
        found += 1
    raise SystemExit(f"no corpus hole under {corpus} fills a {prompt_tokens}-token window")


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.bench.run import _calibrate
    from dspark_lsp.service import CompletionService, ServiceConfig, set_lookup_corpus

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.bench.decode_profile", description=__doc__)
    p.add_argument("--model", default="default", help="pair name / target model (default: the default pair)")
    p.add_argument("--draft", default=None, help="draft override, as for `dspark-lsp bench`")
    p.add_argument("--mode", choices=("target_only", "dspark"), default="target_only")
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per call")
    p.add_argument("--prompt-tokens", type=int, default=256, help="the FIM prompt's window")
    p.add_argument("--prompt-index", type=int, default=0)
    p.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "bench" / "corpus"))
    p.add_argument("--repeats", type=int, default=3, help="plain loop runs (each followed by isolated forwards)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --tokens tokens")
    p.add_argument("--calibrate", action="store_true", help="measure the verify curve and padding as the bench does")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--json", dest="json_out", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = ServiceConfig(model=args.model, draft_model=args.draft, device="cpu", dtype=args.dtype,
                        cache_dir=args.cache_dir, prefix_reuse=False, completion_cache=False, calibrate=False)
    service = CompletionService.load(cfg)
    ids, outside, tracker_factory = _real_prompt(service, args.prompt_tokens, args.prompt_index, Path(args.corpus))
    verify_cost, pad_to = service.verify_cost_ms, None
    if args.calibrate:
        cal = _calibrate(service.target, no_pad=False)
        verify_cost, pad_to = cal.verify_cost, cal.pad_to or None
    config = service.config.decode_config(args.tokens, verify_cost, pad_to)
    draft, key_factory = None, None
    if args.mode == "dspark" and service.draft is not None:
        draft = service.draft
        set_lookup_corpus(draft, lambda: outside)

        def key_factory() -> Callable[[list[int]], bool]:  # as the bench asks: a fresh tracker per call
            tracker = tracker_factory()

            def is_key(gen: list[int]) -> bool:
                text = service.tokenizer.decode(gen, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                return bool(tracker.is_key_next(text))

            return is_key

    eos = () if args.ignore_eos else tuple(service.fim.eos_ids)
    report = profile_decode(service.decoder, ids, config, draft=draft, eos=eos, key_factory=key_factory,
                            repeats=args.repeats)
    report.update(model=args.model, mode=args.mode, pad_to=pad_to, weights=service.weights,
                  load_avg=os.getloadavg())
    _print(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 0


def _print(r: dict[str, Any]) -> None:
    st = r["after_prefill"]
    print(f"model={r['model']} mode={r['mode']} weights={r['weights']} prompt={r['prompt_tokens']} "
          f"new={r['new_tokens']} pad_to={r['pad_to']} load={tuple(round(x, 2) for x in r['load_avg'])}")
    fp = r["first_prefill"]
    print(f"the process's first prefill: rss {fp['rss_before_mb']} -> {fp['rss_after_mb']} MB, os threads "
          f"{fp['os_threads_before']} -> {fp['os_threads_after']}")
    print(f"after a loop's prefill: rss {st.get('rss_mb')} MB (+{st.get('rss_added_mb')} in it; "
          f"peak {st.get('peak_rss_mb')}), os threads "
          f"{st.get('os_threads')}, torch threads {st.get('torch_threads')}, affinity {st.get('affinity')}, "
          f"kv {st.get('kv')}, prefill_bf16 {st.get('prefill_bf16')}, env {st.get('env')}")
    loop, prof = r["loop_per_token_ms"], r["profiled_loop_per_token_ms"]
    print("rss after prefill -> after decode, per plain run (MB): "
          + ", ".join(f"{s['rss_after_prefill_mb']} -> {s['rss_after_decode_mb']}" for s in r["stats"]))
    print("per token (ms, median over decode rows): " + ", ".join(f"{k[:-3]} {v:.2f}" for k, v in loop.items()))
    print(f"isolated one-token forward (context {r['context_for_isolated']}): {r['isolated_forward_ms']:.2f} "
          f"(runs {r['isolated_forward_runs_ms']}); loop forward / isolated {r['loop_forward_over_isolated']}, "
          f"loop wall / isolated {r['loop_wall_over_isolated']}; paired per round: isolated "
          f"{r['paired_isolated_ms']}, loop forward / paired isolated (median) {r['paired_forward_ratio']}")
    print("profiled loop per token: " + ", ".join(f"{k[:-3]} {v:.2f}" for k, v in prof.items()))
    iso = r["profiled_isolated_forward_ms"]
    print("profiled isolated forward: " + ", ".join(f"{k} {v:.2f}" for k, v in iso.items()))


if __name__ == "__main__":
    raise SystemExit(main())
