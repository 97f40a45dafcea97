"""The benchmark harness behind `dspark-lsp bench`.

All methods run on the same prompts in one process, prompt-major (for each prompt, every method in
turn) so slow drifts of a shared machine's load hit every method alike. Every method decodes greedily
for exactly ``--max-new-tokens`` tokens or until EOS, with no syntax stop, so they all produce the same
amount of text and tokens/s compares like with like.

The target, the pair's draft and our decode loop come from `CompletionService` (loaded as the server
loads them, without its prefix cache so every method prefills every prompt); each method is a named
preset (`bench.methods`) applied to the service's decode settings.

Peers: Hugging Face's ``generate`` (``hf_*``) on that same target (the quantized one under dtype auto),
llama.cpp on the target's GGUF file (``llamacpp_*``, through the optional llama-cpp-python), and
``target_fp32``, our target-only loop on the GGUF's weights dequantized to fp32: the reference every
method's fidelity to the file's exact arithmetic is measured against.

A method that raises is reported as failed in its row (why, in one line) and not run on the prompts that
remain; the others finish, the table and JSON are written, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.bench import llamacpp_spec
from dspark_lsp.bench.fp32_reference import fp32_reference
from dspark_lsp.bench.llamacpp import LlamaCppRunner, llamacpp_missing
from dspark_lsp.bench.methods import BY_NAME, METHODS, HfMethod, LlamaCppMethod, LoopMethod, Method
from dspark_lsp.bench.prompts import BenchPrompt, corpus_prompts, find_humaneval_dir, humaneval_prompts
from dspark_lsp.bench.report import MethodResult, method_entries, print_table
from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.drafts.registry import model_of
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.costs import calibrate_forwards, measure_verify_cost, raw_monotone
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.execution import passes
from dspark_lsp.models.gguf_target import weights_kind
from dspark_lsp.models.loader import cpu_has_native_bf16
from dspark_lsp.models.packing import is_packed
from dspark_lsp.prompt import outside_window_ids
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig, set_lookup_corpus


@dataclass
class Prepared:
    prompt: BenchPrompt
    ids: list[int]
    language: str | None
    tracker_factory: Callable[[], Any]  # a fresh syntax generation tracker at the hole
    outside: list[int]  # the document outside the prompt window, as the server gives the n-gram lookup


@dataclass
class Calibration:
    """This machine's verify-cost curve, measured as the server measures it at load."""

    raw_ms: dict[int, float]  # as measured
    verify_cost: dict[int, float]  # what the scheduler is given
    pad_to: dict[int, int]  # forward lengths worth padding to ({} with --no-pad)


@dataclass
class Bench:
    """Everything the methods run against, loaded once."""

    args: argparse.Namespace
    pair: Any  # models.registry.Pair
    service: CompletionService  # the target, its tokenizer, the pair's draft and our decode loop
    assistant: Any  # the Hugging Face assistant model of hf_assisted_*, or None
    assistant_name: str | None
    fp32_model: Any  # target_fp32's model (the target itself when already plain fp32), or None
    fp32_skip: str | None
    prepared: list[Prepared]
    calibration: Calibration
    fp32_decoder: SpeculativeDecoder | None = None
    llama: dict[str, LlamaCppRunner] = field(default_factory=dict)
    spec: dict[str, llamacpp_spec.LlamaCppSpecRunner] = field(default_factory=dict)  # llamacpp_draft's

    @property
    def target(self) -> Any:
        return self.service.target

    @property
    def draft(self) -> DraftSource | None:
        return self.service.draft

    @property
    def eos(self) -> list[int]:
        """What every method stops at: the end-of-text ids only. The service also stops at the FIM
        markers (completion.stop_ids); the bench keeps its own set so that every peer (HF's generate,
        llama.cpp) stops where ours does and its token counts stay comparable with earlier runs."""
        return list(self.service.fim.eos_ids)

    def decode_text(self, ids: list[int]) -> str:
        return str(self.service.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


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


def _check_json_out(path: Path) -> None:
    """Before the run, not after it: a report that cannot be written would be found out only once every
    method had run (a 1.5B bench is minutes). A missing folder is made, as `eval --out` does."""
    if path.is_dir():
        raise UserError(f"--json {path} is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--json {path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"--json {path}: its folder is not writable")


# The bench's own prompts keep the window its published figures were measured at; a replay or soak runs
# the server, which uses its own settings unless a flag says otherwise (a replay once ran 256 tokens
# without saying so, while the server's default is 768 + 256).
BENCH_WINDOW, BENCH_PREFIX_SHARE = 256, 0.75


def run_bench(args: argparse.Namespace) -> int:
    if not args.lsp:
        args.context_window = BENCH_WINDOW if args.context_window is None else args.context_window
        args.prefix_share = BENCH_PREFIX_SHARE if args.prefix_share is None else args.prefix_share
    if args.prefix_share is not None and not 0.1 <= args.prefix_share <= 1.0:
        raise UserError(f"--prefix-share must be in [0.1, 1], not {args.prefix_share}")
    if args.json_out:
        _check_json_out(Path(args.json_out))
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.lsp:
        return _run_lsp(args)
    presets = _chosen_methods(args.methods)
    bench = _load(args, presets)
    results = _initial_results(bench, presets)
    _start_llamacpp(bench, presets, results)
    bench.spec = llamacpp_spec.start_spec_runners(args, bench.pair.target, [pp.ids for pp in bench.prepared],
                                                  bench.decode_text, bench.service.tokenizer, presets, results, _log)
    _warm_fp32(bench, results)
    log = _log
    log(f"{len(bench.prepared)} prompts x {len(presets)} methods, max_new_tokens={args.max_new_tokens}")
    for i, pp in enumerate(bench.prepared):
        for preset in presets:
            r = results[preset.name]
            if r.ran:
                _guarded(r, f"on prompt {pp.prompt.id}", _run_method, bench, preset, pp, r)
        done = results["target_only"]
        if done.ran:
            log(f"[{i + 1}/{len(bench.prepared)}] {pp.prompt.id}: target_only {done.per_prompt_seconds[-1]:.1f}s")
    _finish(bench, results)
    failed = [r.name for r in results.values() if r.failed]
    if failed:
        log(f"failed: {', '.join(failed)} (the reason is in each one's row)")
    return 1 if failed else 0


def _guarded(r: MethodResult, where: str, step: Callable[..., object], *args: Any) -> None:
    """``step(*args)``, a failure of any kind recorded as ``r``'s (one line, logged) instead of raised: a
    method that cannot run must not take every other method's results down with it. A failed method is not
    run on the prompts that remain."""
    try:
        step(*args)
    except Exception as exc:  # any failure: reported in the method's row, the run goes on
        lines = str(exc).strip().splitlines()
        r.failed = f"{type(exc).__name__} {where}: {lines[0] if lines else 'no message'}"
        _log(f"{r.name} failed: {r.failed}")


# ------------------------------------------------------------------------------------- loading
def _chosen_methods(spec: str) -> list[Method]:
    """The presets ``--methods`` names, target_only first when it is not named (it is the baseline)."""
    names = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in names if m not in BY_NAME]
    if unknown:
        raise UserError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    if "target_only" not in names:
        names.insert(0, "target_only")
    return [BY_NAME[m] for m in names]


def _load(args: argparse.Namespace, presets: list[Method]) -> Bench:
    from dspark_lsp.models.registry import pair_for

    pair = pair_for(args.model, args.draft)
    service = _load_service(args)
    assistant, assistant_name = _assistant(args, service.draft)
    fp32_model: Any = None
    fp32_skip: str | None = None
    if any(isinstance(p, LoopMethod) and p.fp32 for p in presets):
        fp32_model, fp32_skip = fp32_reference(args, pair.target, service.target, _log)
    prepared = _prepare_prompts(args, service)
    bench = Bench(args, pair, service, assistant, assistant_name, fp32_model, fp32_skip, prepared,
                  _calibrate(service.target, args.no_pad))
    if fp32_model is not None:
        bench.fp32_decoder = SpeculativeDecoder(fp32_model)
    return bench


def _load_service(args: argparse.Namespace) -> CompletionService:
    """The target and the pair's draft, loaded by the service as the server loads them."""
    cfg = ServiceConfig(
        model=args.model, draft_model=args.draft, device="cpu", dtype=args.dtype, cache_dir=args.cache_dir,
        pack_weights=args.pack, context_window=args.context_window, prefix_share=args.prefix_share,
        # No prefix cache: every method prefills every prompt. The bench calibrates itself (`_calibrate`):
        # it reports the raw curve and can run it unpadded.
        prefix_reuse=False, completion_cache=False, calibrate=False,
        # One file, no other files' context: no budget, so --context-window is the whole prompt (an unused
        # context budget would otherwise widen the window, prompt.py) and the prompts stay comparable.
        context_budget=0,
    )

    def progress(message: str, _fraction: float | None) -> None:
        if message != "ready":
            _log(message)

    return CompletionService.load(cfg, progress)


def _assistant(args: argparse.Namespace, draft: DraftSource | None) -> tuple[Any, str | None]:
    """hf_assisted_*'s assistant: --assistant, else the pair's draft when it is a Hugging Face model."""
    if args.assistant is None:
        ms = model_of(draft)  # the pair's draft model: the service puts it behind n-gram lookup
        if isinstance(ms, ModelDraftSource):
            return ms.model, ms.name
        return None, None
    if not args.assistant:
        return None, args.assistant
    from dspark_lsp.models.loader import load_causal_lm

    _log(f"loading assistant {args.assistant}")
    model, _ = load_causal_lm(args.assistant, device="cpu", dtype=args.dtype, cache_root=args.cache_dir,
                              pack=args.pack)
    return model, args.assistant


def _prepare_prompts(args: argparse.Namespace, service: CompletionService) -> list[Prepared]:
    from dspark_lsp.syntax import SyntaxDocument, detect_language

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
        doc = SyntaxDocument(bp.text, lang)
        # The service's own prompt (its config carries --context-window and --prefix-share; no other files).
        # heal=False: the methods decode these ids themselves, without the healing constraint (a spm
        # setting then gives them the psm prompt, service.prompt_for).
        fp = service.prompt_for(CompletionRequest(text=bp.text, offset=bp.offset, path=bp.path, doc_key=bp.id), doc,
                                heal=False)
        tracker = functools.partial(doc.generation, bp.offset, doc.completion_scope(bp.offset))
        prepared.append(Prepared(bp, fp.ids, lang, tracker, outside_window_ids(bp.text, bp.offset, fp, service.tokenizer)))
    return prepared


def _calibrate(target: Any, no_pad: bool) -> Calibration:
    """The same calibration the server does at load; --no-pad: the curve as measured (made
    non-decreasing), as the scheduler would see it unpadded."""
    plan = calibrate_forwards(target)
    raw = plan.measured_ms
    verify_cost = raw_monotone(raw) if no_pad else plan.cost_ms
    pad_to = {} if no_pad else plan.pad_to
    _log(f"verify cost (ms per forward of n tokens): measured {raw}; padding {pad_to or 'off'}")
    return Calibration(raw, verify_cost, pad_to)


def _initial_results(bench: Bench, presets: list[Method]) -> dict[str, MethodResult]:
    """An empty result per method, with why it is skipped where it cannot run."""
    lcpp_missing = llamacpp_missing() if any(isinstance(p, LlamaCppMethod) for p in presets) else None
    results: dict[str, MethodResult] = {}
    for p in presets:
        r = MethodResult(p.name, engine=p.engine)
        if isinstance(p, HfMethod):
            r.counts_forwards = False
            r.prefill_split = False
        if isinstance(p, llamacpp_spec.LlamaCppSpecMethod):
            r.skipped = llamacpp_spec.spec_bin_missing(bench.args.llamacpp_spec_bin)
        else:
            r.skipped = lcpp_missing if isinstance(p, LlamaCppMethod) else _skip_reason(bench, p)
        results[p.name] = r
    return results


def _skip_reason(bench: Bench, p: LoopMethod | HfMethod) -> str | None:
    if isinstance(p, HfMethod):
        if p.assistant_schedule is not None and bench.assistant is None:
            return "no Hugging Face assistant model (pass --assistant MODEL, e.g. for the 1.5B target)"
        return None
    draft = bench.draft
    if p.needs_model_draft and not (draft is not None and draft.supports_parallel and model_of(draft) is not None):
        return "needs a draft model (AR + parallel steps); the pair drafts by n-gram only"
    if p.draft and draft is None:
        return "no draft source (pair has draft 'none')"
    if p.lookup_only and getattr(draft, "ngram", None) is None:  # a hybrid's lookup link
        return "needs a draft model behind n-gram lookup; the pair drafts by n-gram only"
    return bench.fp32_skip if p.fp32 else None


def _start_llamacpp(bench: Bench, presets: list[Method], results: dict[str, MethodResult]) -> None:
    """A llama.cpp runner per llamacpp_* method that can run, warmed up; a failure skips its method."""
    wanted = [p for p in presets if isinstance(p, LlamaCppMethod) and not results[p.name].skipped]
    if not wanted:
        return
    from dspark_lsp.models.loader import gguf_source, resolve_model

    args, spec = bench.args, bench.pair.target
    gguf = gguf_source(spec, resolve_model(spec, args.cache_dir), args.cache_dir)
    if gguf is None:
        for p in wanted:
            results[p.name].skipped = f"no GGUF file for {spec} (registry models keep it at `models prepare`)"
        return
    # Room for the longest prompt, the budget and the last (capped) draft.
    n_ctx = max(len(pp.ids) for pp in bench.prepared) + args.max_new_tokens + args.lookup_tokens + 8
    for p in wanted:
        _log(f"{p.name}: llama.cpp on {gguf.name}, n_ctx {n_ctx}, {args.threads or 2} threads")
        try:
            runner = LlamaCppRunner(
                gguf, n_ctx=n_ctx, threads=args.threads or 2, lookup_tokens=args.lookup_tokens if p.lookup else None
            )
            runner.warm_up(bench.prepared[0].ids)
        except Exception as exc:  # report, do not abort the whole benchmark
            results[p.name].skipped = f"llama.cpp failed on {gguf.name}: {exc}"
            continue
        bench.llama[p.name] = runner


def _warm_fp32(bench: Bench, results: dict[str, MethodResult]) -> None:
    """Untimed, as the calibration warms the target: the first forwards of a model are slow."""
    if bench.fp32_decoder is None or results["target_fp32"].skipped or bench.fp32_model is bench.target:
        return
    warm = functools.partial(bench.fp32_decoder.generate, bench.prepared[0].ids,
                             config=DecodeConfig(max_new_tokens=2), draft=None, eos_ids=bench.eos)
    _guarded(results["target_fp32"], "warming up", warm)


# ------------------------------------------------------------------------------------- running
def _run_method(bench: Bench, preset: Method, pp: Prepared, r: MethodResult) -> None:
    """One method on one prompt, timed, added to ``r`` (and pass@1 scored where the prompt has a test)."""
    tracker = pp.tracker_factory()
    t0 = time.perf_counter()
    forwards, seconds = 0, None  # seconds: a method timed by itself (llamacpp_draft's binary loads two models)
    if isinstance(preset, HfMethod):
        out = _run_hf(bench, preset, pp)
    elif isinstance(preset, LlamaCppMethod):
        out, forwards = _run_llamacpp(bench, preset, pp, r)
    elif isinstance(preset, llamacpp_spec.LlamaCppSpecMethod):
        out, forwards, seconds = llamacpp_spec.run_spec(bench.spec[preset.name], pp.prompt.id, pp.ids,
                                                        bench.decode_text(pp.ids), bench.args.max_new_tokens, r)
    else:
        out, forwards = _run_loop(bench, preset, pp, r, tracker)
    r.add_output(out, time.perf_counter() - t0 if seconds is None else seconds, forwards, pp.language or "plain")
    if pp.prompt.test and pp.prompt.entry_point:
        text = bench.decode_text(out)
        cut = pp.tracker_factory().stop_index(text, final=True)
        completion = text if cut is None else text[:cut]
        r.pass_total += 1
        r.passed += int(passes(pp.prompt.text, pp.prompt.offset, completion, pp.prompt.test, pp.prompt.entry_point))


def _run_hf(bench: Bench, preset: HfMethod, pp: Prepared) -> list[int]:
    kw: dict[str, Any] = {}
    if preset.prompt_lookup_tokens is not None:
        kw["prompt_lookup_num_tokens"] = preset.prompt_lookup_tokens
    if preset.assistant_schedule is not None:
        assistant = bench.assistant
        assert assistant is not None
        assistant.generation_config.num_assistant_tokens_schedule = preset.assistant_schedule
        assistant.generation_config.num_assistant_tokens = preset.assistant_tokens
        kw["assistant_model"] = assistant
    return _hf_generate(bench.target, pp.ids, bench.args.max_new_tokens, bench.eos, **kw)


def _run_llamacpp(bench: Bench, preset: LlamaCppMethod, pp: Prepared, r: MethodResult) -> tuple[list[int], int]:
    lr = bench.llama[preset.name].generate(pp.ids, bench.args.max_new_tokens, bench.eos)
    r.t_prefill += lr.t_prefill
    r.t_draft += lr.t_draft
    r.drafted += lr.drafted
    return lr.tokens, lr.forwards


def _run_loop(bench: Bench, preset: LoopMethod, pp: Prepared, r: MethodResult, tracker: Any) -> tuple[list[int], int]:
    """Our decode loop, with the pair's draft set up as the service sets it up for a completion."""
    chosen = getattr(bench.draft, "ngram", None) if preset.lookup_only else bench.draft  # a hybrid's n-gram link
    src = chosen if preset.draft else None
    dec = bench.service.decoder
    if preset.fp32:
        assert bench.fp32_decoder is not None
        dec = bench.fp32_decoder
    if src is not None:
        src.reset()
        # The ablation `dspark_window_only` lets the lookup search the prompt alone, as HF's does.
        set_lookup_corpus(src, lambda: pp.outside if preset.lookup_outside_window else [])

    def is_key(ids: list[int]) -> bool:
        return bool(tracker.is_key_next(bench.decode_text(ids)))

    res = dec.generate(pp.ids, config=_decode_config(bench, preset), draft=src, eos_ids=bench.eos, is_key=is_key)
    st = res.stats
    r.draft_forwards += st.draft_forwards
    r.t_draft += st.t_draft
    r.alt_proposed += st.alt_proposed
    r.alt_accepted += st.alt_accepted
    r.t_verify += st.t_verify
    r.t_prefill += st.t_prefill
    return res.tokens, st.target_forwards


def _decode_config(bench: Bench, preset: LoopMethod) -> DecodeConfig:
    """The service's decode settings for the bench's budget and calibration, changed as the preset says."""
    cal = bench.calibration
    cfg = bench.service.config.decode_config(bench.args.max_new_tokens, cal.verify_cost, cal.pad_to or None)
    if preset.fp32:
        cfg.pad_to = None  # the plain one-token loop: the padding plan is the target's
    if preset.k_policy == "fixed":
        cfg.scheduler = SchedulerConfig(fixed_k=bench.args.fixed_k, tau=1e-6, tau_min=1e-6)
    if preset.draft_mode == "plain":
        cfg.draft_mode = "parallel" if isinstance(bench.draft, NgramDraftSource) else "ar"
    elif preset.draft_mode is not None:
        cfg.draft_mode = preset.draft_mode
    if preset.alternates is not None:
        cfg.alternates = preset.alternates
    if preset.k_max is not None and preset.k_policy == "scheduled":
        cfg.scheduler = dataclasses.replace(cfg.scheduler or SchedulerConfig(), k_max=preset.k_max)
    cfg.relaxed = cfg.relaxed or preset.relaxed
    return cfg


def _finish(bench: Bench, results: dict[str, MethodResult]) -> None:
    """The report: its table on stdout, its JSON where --json says."""
    args, cal, target = bench.args, bench.calibration, bench.target
    report = _report(args, bench.pair, bench.assistant_name, bench.prepared, results, cal.verify_cost,
                     weights_kind(target))
    report["settings"]["packed_linears"] = is_packed(target)
    report["settings"]["verify_cost_raw_ms"] = {str(k): v for k, v in cal.raw_ms.items()}
    report["settings"]["pad_to"] = {str(k): v for k, v in cal.pad_to.items()}
    if args.forward_cost:
        peer = bench.llama.get("llamacpp_lookup") or bench.llama.get("llamacpp_greedy")
        report["forward_cost_ms"] = _forward_costs(target, bench.draft, context=args.context_window, peer=peer)
    if args.syntax:
        report["syntax_step_cost"] = _syntax_costs()
    llamacpp_spec.annotate_report(report, bench.spec, results, bench.decode_text)
    print_table(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
        _log(f"wrote {args.json_out}")


def _run_lsp(args: argparse.Namespace) -> int:
    """Typing replay through the real server over stdio, prefix reuse on vs off."""
    from dataclasses import asdict

    from dspark_lsp.bench.lsp_replay import ReplayConfig, compare_reuse, run_replay, server_settings

    settings = server_settings(args)
    file = Path(args.lsp_file) if args.lsp_file else Path(__file__).resolve().parents[1] / "prompt.py"
    if not file.is_file():
        raise UserError(f"{file}: no such file to replay")
    if args.lsp_context is not None:
        settings["contextBudget"] = args.lsp_context
    siblings = sorted(p for p in file.parent.glob(f"*{file.suffix}") if p.is_file() and p.resolve() != file.resolve())
    cfg = ReplayConfig(
        file=file, settings=settings, max_chars=args.lsp_chars, seed=args.seed, extra_documents=args.lsp_documents,
        open_files=tuple(siblings[: args.lsp_open]), workspace=file.parent if args.lsp_open > 0 else None,
        first_after_s=args.lsp_first_after, keep_after=args.lsp_mid_file,
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
    src = model_of(draft)
    if src is not None:
        src.reset()
        if src.wants_features:  # a feature draft reads target features: random rows will do
            d = int(getattr(target.config, "hidden_size", 0))
            src.set_features(0, torch.randn(context + 1, d, generator=g))
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


def _report(
    args: argparse.Namespace,
    pair: Any,
    assistant_name: str | None,
    prepared: list[Prepared],
    results: dict[str, MethodResult],
    verify_cost: dict[int, float],
    dtype_name: str,
) -> dict[str, Any]:
    methods = method_entries(results, sum(len(p.ids) for p in prepared))
    return {
        "model": {"target": pair.target, "draft": pair.draft or pair.draft_kind, "assistant": assistant_name},
        "settings": {
            "max_new_tokens": args.max_new_tokens,
            "context_window": args.context_window,
            "prefix_share": args.prefix_share,
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


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)
