"""The benchmark harness behind `dspark-lsp bench`.

All methods run on the same prompts in one process, prompt-major (for each prompt, every method in
turn) so slow drifts of a shared machine's load hit every method alike. Every method decodes greedily
for exactly ``--max-new-tokens`` tokens or until EOS, with no syntax stop, so they all produce the same
amount of text and tokens/s compares like with like.

Peers: Hugging Face's ``generate`` (``hf_*``), llama.cpp on the target's GGUF file (``llamacpp_*``, through
the optional llama-cpp-python), and ``target_fp32``, our target-only loop on the GGUF's weights dequantized
to fp32: the reference every method's fidelity to the file's exact arithmetic is measured against.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.bench.fidelity import fidelity
from dspark_lsp.bench.llamacpp import LlamaCppRunner, llamacpp_missing
from dspark_lsp.bench.prompts import BenchPrompt, corpus_prompts, find_humaneval_dir, humaneval_prompts
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.costs import calibrate_forwards, measure_verify_cost, raw_monotone
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.engine.model_draft import HybridDraftSource, ModelDraftSource, lookup_of
from dspark_lsp.engine.ngram import NgramDraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.execution import passes
from dspark_lsp.models.gguf_target import weights_kind
from dspark_lsp.models.loader import cpu_has_native_bf16
from dspark_lsp.prompt import build_fim_prompt, outside_window_ids


@dataclass
class MethodResult:
    name: str
    skipped: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    t_draft: float = 0.0
    alt_proposed: int = 0
    alt_accepted: int = 0
    t_verify: float = 0.0
    t_prefill: float = 0.0
    outputs: list[list[int]] = field(default_factory=list)
    per_prompt_seconds: list[float] = field(default_factory=list)
    passed: int = 0
    pass_total: int = 0
    counts_forwards: bool = True
    prefill_split: bool = True  # t_prefill measured (HF's generate does not split its prefill out)
    engine: str = "dspark"  # "dspark" (our loop), "hf" or "llamacpp"
    drafted: int = 0  # llamacpp_lookup: draft tokens sent to its verify forwards
    by_language: dict[str, dict[str, float]] = field(default_factory=dict)

    def add_language(self, lang: str, tokens: int, seconds: float, forwards: int) -> None:
        d = self.by_language.setdefault(lang, {"tokens": 0, "seconds": 0.0, "target_forwards": 0})
        d["tokens"] += tokens
        d["seconds"] += seconds
        d["target_forwards"] += forwards


@dataclass
class Prepared:
    prompt: BenchPrompt
    ids: list[int]
    language: str | None
    is_key: Any
    tracker_factory: Any
    outside: list[int]  # the document outside the prompt window, as the server gives the n-gram lookup


def _eos(fim: Any) -> list[int]:
    return list(fim.eos_ids)


def _hf_generate(model: Any, ids: list[int], max_new: int, eos: list[int], **kw: Any) -> list[int]:
    x = torch.tensor([ids])
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=eos[0],
        **kw,
    )[0, len(ids) :].tolist()
    for i, t in enumerate(out):
        if t in eos:
            return out[:i]
    return out


def run_bench(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.lsp:
        return _run_lsp(args)
    from dspark_lsp.models.fim import detect_fim_tokens
    from dspark_lsp.models.loader import gguf_source, load_causal_lm, resolve_model
    from dspark_lsp.models.packing import is_packed
    from dspark_lsp.models.registry import pair_for
    from dspark_lsp.service import ServiceConfig, load_draft_source
    from dspark_lsp.syntax import SyntaxDocument, detect_language

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    from dspark_lsp.bench.cli import DRAFT_METHODS, LLAMACPP_METHODS, METHODS

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UserError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    if "target_only" not in methods:
        methods.insert(0, "target_only")
    lcpp_missing = llamacpp_missing() if any(m in LLAMACPP_METHODS for m in methods) else None

    pair = pair_for(args.model, args.draft)
    log = _log
    log(f"loading target {pair.target}")
    target, tokenizer = load_causal_lm(
        pair.target, device="cpu", dtype=args.dtype, cache_root=args.cache_dir, pack=args.pack
    )
    fim = detect_fim_tokens(tokenizer)
    eos = _eos(fim)
    cfg = ServiceConfig(
        model=args.model, draft_model=args.draft, device="cpu", dtype=args.dtype, cache_dir=args.cache_dir,
        pack_weights=args.pack,
    )
    draft: DraftSource | None
    if pair.draft_kind == "model" and pair.draft:
        log(f"loading draft {pair.draft}")
        draft = load_draft_source(pair.draft, target, cfg)
    elif pair.draft_kind == "none":
        draft = None
    else:
        draft = NgramDraftSource()
    assistant = None
    assistant_name = args.assistant
    if assistant_name is None and isinstance(draft, HybridDraftSource):
        ms = draft.model_source
        if isinstance(ms, ModelDraftSource):
            assistant, assistant_name = ms.model, ms.name
    elif assistant_name:
        log(f"loading assistant {assistant_name}")
        assistant, _ = load_causal_lm(
            assistant_name, device="cpu", dtype=args.dtype, cache_root=args.cache_dir, pack=args.pack
        )

    # The fp32 reference: the target itself when it already is plain fp32, else a second model.
    fp32_model: Any = None
    fp32_skip: str | None = None
    if "target_fp32" in methods:
        if _is_plain_fp32(target):
            fp32_model = target
        else:
            fp32_skip = _fp32_memory_shortfall(pair.target, args.cache_dir)
            if fp32_skip is None:
                log(f"loading the fp32 reference {pair.target} (dtype float32)")
                fp32_model, _ = load_causal_lm(
                    pair.target, device="cpu", dtype="float32", cache_root=args.cache_dir, pack=args.pack
                )

    # Prompts.
    prompts: list[BenchPrompt] = []
    he_dir = find_humaneval_dir(args.humaneval)
    if he_dir is not None:
        prompts += humaneval_prompts(he_dir, [s for s in args.sets.split(",") if s], args.limit, args.seed)
    if args.corpus:
        prompts += corpus_prompts(Path(args.corpus), args.limit, args.seed)
    if not prompts:
        raise UserError("no prompts: pass --corpus DIR and/or make the HumanEval infilling data reachable")

    prepared: list[Prepared] = []
    for bp in prompts:
        lang = bp.language or detect_language(bp.path, None)
        fp = build_fim_prompt(bp.text, bp.offset, tokenizer, fim, context_window=args.context_window)
        doc = SyntaxDocument(bp.text, lang)
        scope = doc.completion_scope(bp.offset)

        def factory(doc: Any = doc, off: int = bp.offset, scope: Any = scope) -> Any:
            return doc.generation(off, scope)

        prepared.append(Prepared(bp, fp.ids, lang, None, factory, outside_window_ids(bp.text, bp.offset, fp, tokenizer)))

    def decode_text(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def key_fn(tracker: Any) -> Any:
        return lambda ids: bool(tracker.is_key_next(decode_text(ids)))

    decoder = SpeculativeDecoder(target)  # no prefix cache: every method prefills every prompt
    fp32_decoder = SpeculativeDecoder(fp32_model) if fp32_model is not None else None
    # The same calibration the server does at load: this machine's verify-cost curve.
    plan = calibrate_forwards(target)
    raw_cost = plan.measured_ms
    # --no-pad: the curve as measured (made non-decreasing), as the scheduler would see it unpadded.
    verify_cost = raw_monotone(raw_cost) if args.no_pad else plan.cost_ms
    pad_to = {} if args.no_pad else plan.pad_to
    log(f"verify cost (ms per forward of n tokens): measured {raw_cost}; padding {pad_to or 'off'}")
    results = {m: MethodResult(m) for m in methods}
    has_parallel_model = draft is not None and getattr(draft, "supports_parallel", False) and not isinstance(
        draft, NgramDraftSource
    )
    for m in methods:
        r = results[m]
        if m in DRAFT_METHODS and draft is None:
            r.skipped = "no draft source (pair has draft 'none')"
        if m in ("draft_ar_only", "draft_parallel_only") and not has_parallel_model:
            r.skipped = "needs a draft model (AR + parallel steps); the pair drafts by n-gram only"
        if m.startswith("hf_assisted") and assistant is None:
            r.skipped = "no Hugging Face assistant model (pass --assistant MODEL, e.g. for the 1.5B target)"
        if m.startswith("hf_"):
            r.counts_forwards = False
            r.prefill_split = False
            r.engine = "hf"
        if m == "target_fp32" and fp32_skip:
            r.skipped = fp32_skip
        if m in LLAMACPP_METHODS:
            r.engine = "llamacpp"
            r.skipped = r.skipped or lcpp_missing
    llama: dict[str, LlamaCppRunner] = {}
    wanted = [m for m in methods if m in LLAMACPP_METHODS and not results[m].skipped]
    if wanted:
        gguf = gguf_source(pair.target, resolve_model(pair.target, args.cache_dir), args.cache_dir)
        if gguf is None:
            for m in wanted:
                results[m].skipped = f"no GGUF file for {pair.target} (registry models keep it at `models prepare`)"
        else:
            # Room for the longest prompt, the budget and the last (capped) draft.
            n_ctx = max(len(pp.ids) for pp in prepared) + args.max_new_tokens + args.lookup_tokens + 8
            for m in wanted:
                log(f"{m}: llama.cpp on {gguf.name}, n_ctx {n_ctx}, {args.threads or 2} threads")
                try:
                    runner = LlamaCppRunner(
                        gguf, n_ctx=n_ctx, threads=args.threads or 2,
                        lookup_tokens=args.lookup_tokens if m == "llamacpp_lookup" else None,
                    )
                    runner.warm_up(prepared[0].ids)
                except Exception as exc:  # report, do not abort the whole benchmark
                    results[m].skipped = f"llama.cpp failed on {gguf.name}: {exc}"
                    continue
                llama[m] = runner
    if fp32_decoder is not None and not results["target_fp32"].skipped and fp32_model is not target:
        # Untimed, as the calibration above warms the target: the first forwards of a model are slow.
        fp32_decoder.generate(prepared[0].ids, config=DecodeConfig(max_new_tokens=2), draft=None, eos_ids=eos)

    log(f"{len(prepared)} prompts x {len(methods)} methods, max_new_tokens={args.max_new_tokens}")
    for i, pp in enumerate(prepared):
        for m in methods:
            r = results[m]
            if r.skipped:
                continue
            tracker = pp.tracker_factory()
            t0 = time.perf_counter()
            forwards = 0
            if m == "hf_greedy":
                out = _hf_generate(target, pp.ids, args.max_new_tokens, eos)
            elif m == "hf_prompt_lookup":
                out = _hf_generate(target, pp.ids, args.max_new_tokens, eos, prompt_lookup_num_tokens=10)
            elif m in LLAMACPP_METHODS:
                lr = llama[m].generate(pp.ids, args.max_new_tokens, eos)
                out = lr.tokens
                forwards = lr.forwards
                r.t_prefill += lr.t_prefill
                r.t_draft += lr.t_draft
                r.drafted += lr.drafted
            elif m.startswith("hf_assisted"):
                assert assistant is not None
                schedule = "heuristic" if m.endswith("heuristic") else "constant"
                assistant.generation_config.num_assistant_tokens_schedule = schedule
                assistant.generation_config.num_assistant_tokens = 20 if schedule == "heuristic" else 5
                out = _hf_generate(target, pp.ids, args.max_new_tokens, eos, assistant_model=assistant)
            else:
                dcfg = DecodeConfig(
                    max_new_tokens=args.max_new_tokens,
                    scheduler=SchedulerConfig(verify_cost_ms=verify_cost),
                    pad_to=pad_to or None,
                )
                src: DraftSource | None = draft
                dec = decoder
                if m == "target_only":
                    src = None
                elif m == "target_fp32":
                    assert fp32_decoder is not None
                    src, dec = None, fp32_decoder
                    dcfg.pad_to = None  # the plain one-token loop: the padding plan is the target's
                elif m == "fixed_k":
                    dcfg.scheduler = SchedulerConfig(fixed_k=args.fixed_k, tau=1e-6, tau_min=1e-6)
                    dcfg.draft_mode = "parallel" if isinstance(draft, NgramDraftSource) else "ar"
                elif m == "dspark_chain":
                    dcfg.alternates = 0  # ablation: the draft's chain only, no runner-ups beside it
                elif m == "dspark_relaxed":
                    dcfg.relaxed = True
                elif m == "draft_ar_only":
                    dcfg.draft_mode = "ar"
                elif m == "draft_parallel_only":
                    dcfg.draft_mode = "parallel"
                if src is not None:
                    src.reset()
                    lookup = lookup_of(src)
                    if lookup is not None:
                        # As the server does: the lookup also searches the document outside the window
                        # (the ablation `dspark_window_only` searches the prompt alone, as HF's does).
                        lookup.extra_corpus = [] if m == "dspark_window_only" else pp.outside
                res = dec.generate(pp.ids, config=dcfg, draft=src, eos_ids=eos, is_key=key_fn(tracker))
                out = res.tokens
                forwards = res.stats.target_forwards
                r.draft_forwards += res.stats.draft_forwards
                r.t_draft += res.stats.t_draft
                r.alt_proposed += res.stats.alt_proposed
                r.alt_accepted += res.stats.alt_accepted
                r.t_verify += res.stats.t_verify
                r.t_prefill += res.stats.t_prefill
            dt = time.perf_counter() - t0
            r.tokens += len(out)
            r.seconds += dt
            r.target_forwards += forwards
            r.outputs.append(out)
            r.per_prompt_seconds.append(dt)
            r.add_language(pp.language or "plain", len(out), dt, forwards)
            if pp.prompt.test and pp.prompt.entry_point:
                text = decode_text(out)
                cut = pp.tracker_factory().stop_index(text, final=True)
                completion = text if cut is None else text[:cut]
                r.pass_total += 1
                r.passed += int(
                    passes(pp.prompt.text, pp.prompt.offset, completion, pp.prompt.test, pp.prompt.entry_point)
                )
        done = results["target_only"]
        log(f"[{i + 1}/{len(prepared)}] {pp.prompt.id}: target_only {done.per_prompt_seconds[-1]:.1f}s")

    dtype_name = weights_kind(target)
    report = _report(args, pair, assistant_name, prepared, results, verify_cost, dtype_name)
    report["settings"]["packed_linears"] = is_packed(target)
    report["settings"]["verify_cost_raw_ms"] = {str(k): v for k, v in raw_cost.items()}
    report["settings"]["pad_to"] = {str(k): v for k, v in pad_to.items()}
    if args.forward_cost:
        peer = llama.get("llamacpp_lookup") or llama.get("llamacpp_greedy")
        report["forward_cost_ms"] = _forward_costs(target, draft, context=args.context_window, peer=peer)
    if args.syntax:
        report["syntax_step_cost"] = _syntax_costs()
    _print_table(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
        log(f"wrote {args.json_out}")
    return 0


def _run_lsp(args: argparse.Namespace) -> int:
    """Typing replay through the real server over stdio, prefix reuse on vs off."""
    from dataclasses import asdict

    from dspark_lsp.bench.lsp_replay import ReplayConfig, compare_reuse, run_replay, server_settings

    settings = server_settings(args)
    file = Path(args.lsp_file) if args.lsp_file else Path(__file__).resolve().parents[1] / "prompt.py"
    if not file.is_file():
        raise UserError(f"{file}: no such file to replay")
    cfg = ReplayConfig(
        file=file, settings=settings, max_chars=args.lsp_chars, seed=args.seed, extra_documents=args.lsp_documents
    )
    report: dict[str, Any] = compare_reuse(cfg) if not args.lsp_no_compare else asdict(run_replay(cfg))
    report["file"] = str(file)
    print(json.dumps(report, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 0


def _median_ms(fn: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return round(times[len(times) // 2], 2)


FORWARD_SIZES = (1, 2, 4, 6, 8)


def _forward_costs(target: Any, draft: DraftSource | None, context: int,
                   peer: LlamaCppRunner | None = None) -> dict[str, Any]:
    """Fastest-of-5 ms of one target forward of n tokens on a ``context``-token KV cache, raw (the
    scheduler's calibration, without its monotone smoothing), and median ms of the draft's steps. With
    ``peer``, llama.cpp's forward on the same context right after ours, then ours again: the faster of
    our two runs stands (the host's load drifts over a run)."""
    raw = measure_verify_cost(target, context=context, sizes=FORWARD_SIZES, repeats=5)
    out: dict[str, Any] = {"context": context, "target": {str(n): ms for n, ms in raw.items()}}
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, min(int(target.config.vocab_size), 100_000), (context,), generator=g).tolist()
    if peer is not None:
        out["llamacpp"] = {str(n): ms for n, ms in peer.forward_costs(ctx, FORWARD_SIZES).items()}
        again = measure_verify_cost(target, context=context, sizes=FORWARD_SIZES, repeats=5)
        out["target"] = {str(n): min(raw[n], again[n]) for n in FORWARD_SIZES}
    model_src = getattr(draft, "model_source", draft)
    if model_src is not None and not isinstance(model_src, NgramDraftSource):
        src = model_src
        src.reset()
        set_features = getattr(src, "set_features", None)
        if set_features is not None:  # a feature draft reads target features: random rows will do
            d = int(getattr(target.config, "hidden_size", 0))
            set_features(0, torch.randn(context + 1, d, generator=g))
        src.propose(ctx, 1, parallel=False, tau=0.0)  # prefill the draft's own cache once
        flip = [0]
        for mode, parallel, n in (("draft_ar_1", False, 1), ("draft_parallel_4", True, 4)):
            if parallel and not src.supports_parallel:
                continue

            def dstep(parallel: bool = parallel, n: int = n) -> None:
                # Alternate the last token so each call re-syncs by exactly one token: one forward.
                flip[0] ^= 1
                src.propose(ctx + [ctx[flip[0]]], n, parallel=parallel, tau=0.0)

            out[mode] = _median_ms(dstep, repeats=9)
        out["draft_ar_share_of_target_1"] = round(out["draft_ar_1"] / out["target"]["1"], 4)
    return out


def _syntax_costs() -> dict[str, Any]:
    from dspark_lsp.syntax.bench import measure_step_cost

    out: dict[str, Any] = {}
    for lang in ("python", "javascript", "typescript", "go", "rust", "java", "c", "cpp"):
        try:
            out[lang] = measure_step_cost(lang, lines=2000)
        except Exception as exc:  # report, do not abort the whole benchmark
            out[lang] = {"error": str(exc)}
    return out


def _is_plain_fp32(model: Any) -> bool:
    """True for a model already running plain fp32 weights (not the quantized GGUF path)."""
    return weights_kind(model) == "float32"


def _fp32_bytes(directory: Path) -> int | None:
    """Bytes of a model directory's weights in fp32, from its safetensors index (no tensor read)."""
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    numel = 0
    try:
        for f in files:
            with safe_open(str(f), framework="pt") as fh:
                for name in fh.keys():
                    n = 1
                    for d in fh.get_slice(name).get_shape():
                        n *= int(d)
                    numel += n
    except (OSError, ValueError, RuntimeError):
        return None
    return numel * 4


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _fp32_memory_shortfall(spec: str, cache_root: str | None) -> str | None:
    """Why ``target_fp32`` is skipped for lack of memory, or None when its model fits (or we cannot tell)."""
    from dspark_lsp.models.loader import resolve_model

    source = resolve_model(spec, cache_root)
    need = _fp32_bytes(source) if isinstance(source, Path) else None
    avail = _mem_available()
    if need is None or avail is None:
        return None
    need = int(need * 1.2) + (512 << 20)  # loading and packing copy some tensors; leave room for the rest
    if avail >= need:
        return None
    return f"the fp32 reference needs ~{need / 2**30:.1f} GiB free, {avail / 2**30:.1f} GiB available"


def _decode_tps(r: MethodResult) -> float | None:
    """Tokens per second of the decode alone (after the prefill), for every method that times its prefill
    (our loops, llama.cpp's; not HF's generate). All tokens over the time after the prefill, as before."""
    if not r.prefill_split or r.seconds <= r.t_prefill:
        return None
    return r.tokens / (r.seconds - r.t_prefill)


def _method_entry(r: MethodResult, base: MethodResult, reference: MethodResult | None,
                  prompt_tokens: int) -> dict[str, Any]:
    """One method's report: speed against ``base`` (target_only), prefill and decode apart, sameness to
    ``base`` and fidelity to ``reference`` (target_fp32; None when it did not run)."""
    if r.skipped:
        return {"skipped": r.skipped}
    base_tps = base.tokens / base.seconds if base.seconds else 0.0
    base_dec = _decode_tps(base)
    tps = r.tokens / r.seconds if r.seconds else 0.0
    dt = _decode_tps(r)
    ours = r.engine == "dspark"
    return {
        "engine": r.engine,
        "tokens_per_s": round(tps, 3),
        "speedup": round(tps / base_tps, 3) if base_tps else None,
        "prefill_s": round(r.t_prefill, 3) if r.prefill_split else None,
        "prefill_tokens_per_s": round(prompt_tokens / r.t_prefill, 1) if r.prefill_split and r.t_prefill else None,
        "decode_tokens_per_s": None if dt is None else round(dt, 3),
        "decode_speedup": round(dt / base_dec, 3) if dt is not None and base_dec else None,
        "mean_accepted": round(r.tokens / r.target_forwards, 3) if r.counts_forwards and r.target_forwards else None,
        "identical": all(a == b for a, b in zip(r.outputs, base.outputs, strict=True)),
        "identical_prompts": sum(a == b for a, b in zip(r.outputs, base.outputs, strict=True)),
        "vs_fp32": fidelity(r.outputs, reference.outputs) if reference is not None else None,
        "tokens": r.tokens,
        "seconds": round(r.seconds, 3),
        "target_forwards": r.target_forwards if r.counts_forwards else None,
        "draft_forwards": r.draft_forwards if ours else None,
        "drafted_tokens": r.drafted if r.engine == "llamacpp" else None,
        "alternates": {"proposed": r.alt_proposed, "accepted": r.alt_accepted} if ours else None,
        "time_split_s": {
            "prefill": round(r.t_prefill, 3),
            "draft": round(r.t_draft, 3),
            # llama.cpp's decode time is not split into its forwards and the rest
            "verify": round(r.t_verify, 3) if ours else None,
        }
        if r.prefill_split
        else None,
        "pass_at_1": round(r.passed / r.pass_total, 4) if r.pass_total else None,
        "by_language": {
            lang: {
                "tokens_per_s": round(d["tokens"] / d["seconds"], 3) if d["seconds"] else 0.0,
                "mean_accepted": round(d["tokens"] / d["target_forwards"], 3)
                if r.counts_forwards and d["target_forwards"]
                else None,
            }
            for lang, d in r.by_language.items()
        },
    }


def _report(
    args: argparse.Namespace,
    pair: Any,
    assistant_name: str | None,
    prepared: list[Prepared],
    results: dict[str, MethodResult],
    verify_cost: dict[int, float],
    dtype_name: str,
) -> dict[str, Any]:
    base = results["target_only"]
    ref = results.get("target_fp32")
    reference = ref if ref is not None and not ref.skipped else None
    prompt_tokens = sum(len(p.ids) for p in prepared)
    methods = {name: _method_entry(r, base, reference, prompt_tokens) for name, r in results.items()}
    return {
        "model": {"target": pair.target, "draft": pair.draft or pair.draft_kind, "assistant": assistant_name},
        "settings": {
            "max_new_tokens": args.max_new_tokens,
            "context_window": args.context_window,
            "limit": args.limit,
            "seed": args.seed,
            "fixed_k": args.fixed_k,
            "lookup_tokens": args.lookup_tokens,
            "threads": torch.get_num_threads(),
            "llamacpp_threads": args.threads or 2,
            "dtype": dtype_name,
            "cpu_native_bf16": cpu_has_native_bf16(),
            "verify_cost_ms": {str(k): v for k, v in verify_cost.items()},
        },
        "prompts": [{"id": p.prompt.id, "source": p.prompt.source, "language": p.language, "prompt_tokens": len(p.ids)} for p in prepared],
        "methods": methods,
    }


TABLE_HEADER = (
    f"{'method':24} {'tok/s':>8} {'speedup':>8} {'prefill s':>9} {'dec tok/s':>9} {'decode x':>8} {'acc/fwd':>8} "
    f"{'identical':>10} {'=fp32':>6} {'div mean/min':>12} {'pass@1':>7} {'draft s':>8} {'verify s':>9}"
)


def _table_row(name: str, r: dict[str, Any]) -> str:
    """One method's line of the table: "n/a" where a method cannot measure a figure (HF's generate has
    no prefill split), "-" where it has none (no fp32 reference ran, no forward count, no test)."""
    if "skipped" in r:
        return f"{name:24} skipped: {r['skipped']}"

    def num(v: float | None, fmt: str, missing: str = "-") -> str:
        return missing if v is None else format(v, fmt)

    split = r.get("time_split_s") or {}
    na = "n/a" if r.get("prefill_s") is None else "-"
    fid = r.get("vs_fp32")
    same = "-" if fid is None or fid["identical_share"] is None else f"{fid['identical_share']:.2f}"
    div = "-" if fid is None or fid["mean_first_divergence"] is None else (
        f"{fid['mean_first_divergence']:.1f}/{fid['min_first_divergence']}")
    return (
        f"{name:24} {r['tokens_per_s']:8.2f} {num(r['speedup'], '.2f'):>8} {num(r.get('prefill_s'), '.2f', na):>9} "
        f"{num(r.get('decode_tokens_per_s'), '.2f', na):>9} {num(r.get('decode_speedup'), '.2f', na):>8} "
        f"{num(r['mean_accepted'], '.2f'):>8} {str(r['identical']):>10} {same:>6} {div:>12} "
        f"{num(r['pass_at_1'], '.2f'):>7} {num(split.get('draft'), '.2f'):>8} {num(split.get('verify'), '.2f'):>9}"
    )


def _print_table(report: dict[str, Any]) -> None:
    m = report["model"]
    print(f"target={m['target']} draft={m['draft']} assistant={m['assistant']} prompts={len(report['prompts'])} "
          f"weights={report['settings']['dtype']}")
    print(TABLE_HEADER)
    print("-" * len(TABLE_HEADER))
    for name, r in report["methods"].items():
        print(_table_row(name, r))
    print("prefill s: all prompts' prefill; dec tok/s: tokens over the time after it; =fp32: share of prompts "
          "identical to target_fp32; div mean/min: first differing token vs target_fp32 (identical = full length)")
    fc = report.get("forward_cost_ms")
    if fc:
        sizes = "/".join(fc["target"])
        line = f"one forward of {sizes} tokens on {fc['context']}: ours " + " / ".join(
            f"{v:.1f}" for v in fc["target"].values()) + " ms"
        if "llamacpp" in fc:
            line += "; llama.cpp " + " / ".join(f"{v:.1f}" for v in fc["llamacpp"].values()) + " ms"
        print(line)
    if "syntax_step_cost" in report:
        print("syntax classification cost per decode step (2,000-line file):")
        for lang, d in report["syntax_step_cost"].items():
            print(f"  {lang:12} {d}")


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)
