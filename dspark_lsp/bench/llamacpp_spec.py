"""llama.cpp's own draft-model speculative decoding as a bench peer: ``llamacpp_draft``.

llama-cpp-python (`bench.llamacpp`) offers prompt lookup as its only speculative mode; llama.cpp's draft-model
path lives in its C++ examples. This method runs one of them, ``llama-speculative-simple`` (built apart from
llama-cpp-python's vendored source, bench/results/2026-12-07-llamacpp-draft/run.sh), once per prompt: the
target's GGUF file (``-m``) with a registry model's GGUF file as its draft (``-md``), greedy
(``--temp 0 --top-k 1``), the draft drafting greedily too (its default ``--spec-draft-p-min 0``).

What is measured, and how it lines up with the other llama.cpp methods:

* The prompt is the text of our prompt ids (special tokens spelled out), which the binary tokenizes with
  special tokens parsed, as llama-cpp-python's ``tokenize(special=True)`` does; its prompt tokens are checked
  against ours (`SpecRecord`).
* Timing is the binary's own (its wall time would hold two model loads per prompt). Its prefill ("encoded")
  covers the prompt but its last token, on the target and the draft; the last prompt token goes into its
  first verify forward. Its decode runs until the budget's last token is out (read from the log's time
  stamps: the binary drafts past the budget in its last round, which the other methods' capped drafts do
  not). So its first new token is not free as the other methods' is (they get it from their prefill): at
  N new tokens that understates its decode rate by about N / (N - 1) against theirs.
* Forwards: its prefill and each verify forward up to that token, as the other methods count them.
* Its output comes as one log entry per token (``--log-jsonl``): the text of each new token, mapped back to
  ids through the target's tokenizer (`PieceIds`) so that sameness to the other methods compares ids.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_lsp.bench.methods import LlamaCppSpecMethod
from dspark_lsp.bench.report import MethodResult

SPEC_BIN_ENV = "DSPARK_LLAMACPP_SPEC_BIN"
SPEC_BIN_MISSING = (
    f"no llama.cpp speculative binary (pass --llamacpp-spec-bin or set {SPEC_BIN_ENV} to a build of "
    "llama.cpp's llama-speculative-simple; bench/results/2026-12-07-llamacpp-draft/run.sh builds one)"
)
# Longest a prompt's run may take: a 1.5B target's 64 tokens on 2 cores is well under a minute.
RUN_TIMEOUT_S = 600

_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNT = re.compile(r"^(n_predict|n_drafted|n_accept)\s*=\s*(\d+)")
_ACCEPTED = re.compile(r"accepted (\d+)/(\d+) draft tokens")


class SpecOutputError(RuntimeError):
    """The binary's output lacks what the bench reads from it."""


def spec_bin(option: str | None) -> str | None:
    """The binary: ``--llamacpp-spec-bin``, else $DSPARK_LLAMACPP_SPEC_BIN, else None."""
    return option or os.environ.get(SPEC_BIN_ENV) or None


def spec_bin_missing(option: str | None) -> str | None:
    """None when the binary can be run, else why ``llamacpp_draft`` is skipped (one line)."""
    path = spec_bin(option)
    if path is None:
        return SPEC_BIN_MISSING
    if not Path(path).is_file() or not os.access(path, os.X_OK):
        return f"llama.cpp speculative binary {path} is not an executable file"
    return None


@dataclass
class SpecOutput:
    """What one run of ``llama-speculative-simple --log-jsonl -lv 5`` printed on stdout."""

    prompt_pieces: list[str]  # the prompt's tokens as the binary tokenized it
    pieces: list[str]  # each new token's text, in order (an end-of-generation token is not printed)
    piece_us: list[int]  # when each was logged (µs since the binary's log started)
    piece_round: list[int]  # which verify forward (0, 1, ...) put each out
    rounds: list[tuple[int, int]]  # per verify forward: (accepted, drafted)
    t_encode: float  # its own "encoded" seconds: the prefill of the prompt but its last token
    t_decode: float  # its own "decoded" seconds: every verify round, the one past the budget included
    end_us: int  # when the "encoded" line was logged: right after its decode timer stopped
    counts: dict[str, int]  # its n_predict, n_drafted, n_accept (every round)


def _entries(stdout: str) -> list[tuple[str, str, int]]:
    """(level, message, µs) of each JSON log line; anything else on stdout is not the log's."""
    out = []
    for line in stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "log":
            out.append((str(obj.get("level")), str(obj.get("msg", "")), int(obj.get("time", 0))))
    return out


def parse_spec_output(stdout: str) -> SpecOutput:
    """The prompt, the new tokens and the figures of one run. The example logs (level "none") a blank
    separator, each prompt token, each round's new tokens followed by its "accepted a/d" debug line, and
    after the last round a separator again; "encoded N tokens" says how many of those were the prompt's."""
    entries = _entries(stdout)
    outputs = [(i, msg, us) for i, (level, msg, us) in enumerate(entries) if level == "none"]
    rounds = [(i, int(m[1]), int(m[2]), us) for i, (level, msg, us) in enumerate(entries)
              if level == "debug" and (m := _ACCEPTED.search(msg))]
    found: dict[str, Any] = {}
    for _, msg, us in entries:
        for key, rx in (("encoded", _ENCODED), ("decoded", _DECODED)):
            if key not in found and (m := rx.search(msg)):
                found[key] = (int(m[1]), float(m[2]), us)
        if m := _COUNT.match(msg.strip()):
            found[m[1]] = int(m[2])
    missing = [k for k in ("encoded", "decoded", "n_predict", "n_drafted", "n_accept") if k not in found]
    if missing or not rounds or not outputs:
        raise SpecOutputError(
            f"llama.cpp's speculative output lacks {', '.join(missing) or 'its per-round debug lines'} "
            "(run with --log-jsonl -lv 5)")
    n_prompt, t_encode, end_us = found["encoded"]
    last_round = rounds[-1][0]
    gen = [(i, msg, us) for i, msg, us in outputs[1 + n_prompt :] if i < last_round]
    return SpecOutput(
        prompt_pieces=[msg for _, msg, _ in outputs[1 : 1 + n_prompt]],
        pieces=[msg for _, msg, _ in gen],
        piece_us=[us for _, _, us in gen],
        # A round's debug line comes right after its tokens: a token's round is the first line after it.
        piece_round=[next(k for k, r in enumerate(rounds) if r[0] > i) for i, _, _ in gen],
        rounds=[(a, d) for _, a, d, _ in rounds],
        t_encode=t_encode,
        t_decode=found["decoded"][1],
        end_us=end_us,
        counts={k: found[k] for k in ("n_predict", "n_drafted", "n_accept")},
    )


@dataclass
class SpecRun:
    """One prompt's run, cut to the token budget."""

    pieces: list[str]
    seconds: float  # its prefill, then its decode until the budget's last token was out
    t_prefill: float  # its own prefill ("encoded")
    forwards: int  # target forwards: the prefill and each verify forward up to that token
    drafted: int  # draft tokens sent to those verify forwards
    accepted: int  # of which the target kept
    t_first: float  # until its first new token was out (its first verify forward included)


def cut_to_budget(out: SpecOutput, max_new: int) -> SpecRun:
    """The run as the bench counts it: the first ``max_new`` tokens and the rounds that produced them."""
    n = min(len(out.pieces), max_new)
    dec_start_us = out.end_us - out.t_decode * 1e6
    if n == 0:  # an end-of-generation token first: every round counts
        used = out.rounds
        t_end = out.t_encode + out.t_decode
        t_first = t_end
    else:
        used = out.rounds[: out.piece_round[n - 1] + 1]  # up to the round that put token n out
        t_end = out.t_encode + max(0.0, out.piece_us[n - 1] - dec_start_us) / 1e6
        t_first = out.t_encode + max(0.0, out.piece_us[0] - dec_start_us) / 1e6
    return SpecRun(
        pieces=out.pieces[:n],
        seconds=t_end,
        t_prefill=out.t_encode,
        forwards=1 + len(used),
        drafted=sum(d for _, d in used),
        accepted=sum(a for a, _ in used),
        t_first=t_first,
    )


class PieceIds:
    """Token texts as llama.cpp prints them, back to the target tokenizer's ids. Byte-level BPE gives each
    id its own text, except byte pieces of a split character (printed alike): those, and any text not in
    the table, are re-tokenized instead."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        table: dict[str, int] = {}
        shared: set[str] = set()
        for i in range(len(tokenizer)):
            text = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if text in table:
                shared.add(text)
            table[text] = i
        self.table = {t: i for t, i in table.items() if t not in shared}
        self.unmapped = 0  # pieces re-tokenized rather than looked up

    def __call__(self, pieces: Sequence[str]) -> list[int]:
        ids: list[int] = []
        for p in pieces:
            if p in self.table:
                ids.append(self.table[p])
            else:
                self.unmapped += 1
                ids += list(self.tokenizer.encode(p, add_special_tokens=False))
        return ids


@dataclass
class SpecRecord:
    """One prompt's run, for the report: the binary's prompt beside ours, its own counts, its text."""

    prompt: str
    prompt_tokens: int  # as the binary tokenized the prompt text
    our_prompt_tokens: int
    same_prompt_ids: bool
    text: str  # its new tokens' text, cut to the budget
    n_drafted: int
    n_accept: int
    t_first: float


@dataclass
class LlamaCppSpecRunner:
    """``llama-speculative-simple`` on the target's GGUF with a draft GGUF, greedy, one process per prompt."""

    binary: str
    target_gguf: Path
    draft_gguf: Path
    n_ctx: int
    threads: int
    draft_max: int  # --spec-draft-n-max; 0: the binary's default (3)
    piece_ids: Callable[[Sequence[str]], list[int]]
    records: list[SpecRecord] = field(default_factory=list)

    def command(self, prompt: str, max_new: int) -> list[str]:
        t = str(self.threads)
        cmd = [self.binary, "-m", str(self.target_gguf), "-md", str(self.draft_gguf), "--spec-type", "draft-simple",
               "-p", prompt, "--no-escape",  # the prompt is source code: its backslashes stay as they are
               # -n M prints at least M + 1 tokens (it stops once more than M are out): M = budget - 1.
               "-n", str(max(0, max_new - 1)), "--temp", "0", "--top-k", "1", "--seed", "0",
               "-c", str(self.n_ctx), "-b", str(self.n_ctx), "-ub", str(self.n_ctx),
               "-t", t, "-tb", t, "-td", t, "-tbd", t,
               # Flash attention off, as llama-cpp-python's default (llamacpp_greedy, llamacpp_lookup) has it:
               # the same attention arithmetic (the binary's "auto" turns it on for the CPU).
               "-fa", "off",
               "--log-jsonl", "--log-timestamps", "-lv", "5"]
        if self.draft_max:
            cmd += ["--spec-draft-n-max", str(self.draft_max)]
        return cmd

    def run(self, prompt: str, max_new: int) -> SpecOutput:
        proc = subprocess.run(self.command(prompt, max_new), capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=RUN_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{Path(self.binary).name} exited with {proc.returncode}: {tail}")
        return parse_spec_output(proc.stdout)

    def generate(self, prompt_id: str, ids: list[int], text: str, max_new: int) -> tuple[list[int], SpecRun]:
        """Greedy continuation of the prompt ``ids`` (given as their ``text``): its new ids and figures."""
        out = self.run(text, max_new)
        run = cut_to_budget(out, max_new)
        self.records.append(SpecRecord(
            prompt_id, len(out.prompt_pieces), len(ids), self.piece_ids(out.prompt_pieces) == ids,
            "".join(run.pieces), out.counts["n_drafted"], out.counts["n_accept"], round(run.t_first, 4)))
        return self.piece_ids(run.pieces), run


# ------------------------------------------------------------------------------- the bench's side
def _gguf(spec: str, cache_dir: str | None) -> Path | None:
    """A registry model's kept GGUF file (or a local dir's only one); None when it has none or is not prepared."""
    from dspark_lsp.errors import UserError
    from dspark_lsp.models.loader import gguf_source, resolve_model

    try:
        return gguf_source(spec, resolve_model(spec, cache_dir), cache_dir)
    except UserError:  # not prepared, or not a model at all
        return None


def start_spec_runners(args: Any, target: str, prompts: Sequence[list[int]], decode: Callable[[list[int]], str],
                       tokenizer: Any, presets: Sequence[Any], results: dict[str, MethodResult],
                       log: Callable[[str], None]) -> dict[str, LlamaCppSpecRunner]:
    """A runner per llamacpp_draft-like method that can run, warmed up (one short untimed run pages both
    files in); a method that cannot gets its one-line reason as its skip."""
    wanted = [p for p in presets if isinstance(p, LlamaCppSpecMethod) and not results[p.name].skipped]
    if not wanted:
        return {}
    binary = spec_bin(args.llamacpp_spec_bin)
    assert binary is not None  # a missing binary skipped the method already
    target_gguf = _gguf(target, args.cache_dir)
    piece_ids: PieceIds | None = None
    runners: dict[str, LlamaCppSpecRunner] = {}
    for p in wanted:
        draft_gguf = _gguf(p.draft, args.cache_dir)
        why = (f"no GGUF file for {target} (registry models keep it at `models prepare`)" if target_gguf is None
               else f"the target {target} is its draft {p.draft} itself" if target == p.draft
               else f"no GGUF file for the draft {p.draft} (run `dspark-lsp models prepare {p.draft}`)"
               if draft_gguf is None else None)
        if why is not None:
            results[p.name].skipped = why
            continue
        assert target_gguf is not None and draft_gguf is not None
        piece_ids = piece_ids or PieceIds(tokenizer)
        # Room for the longest prompt (re-tokenized: a few tokens of slack), the budget and a last draft.
        n_ctx = max(len(ids) for ids in prompts) + args.max_new_tokens + (args.llamacpp_draft_max or 3) + 16
        runner = LlamaCppSpecRunner(binary, target_gguf, draft_gguf, n_ctx, args.threads or 2,
                                    args.llamacpp_draft_max, piece_ids)
        log(f"{p.name}: {Path(binary).name} on {target_gguf.name} with draft {draft_gguf.name}, n_ctx {n_ctx}, "
            f"{runner.threads} threads, draft max {runner.draft_max or 'default (3)'}")
        try:
            runner.run(decode(prompts[0]), 4)
        except Exception as exc:  # report, do not abort the whole benchmark
            results[p.name].skipped = f"llama.cpp's speculative binary failed: {exc}"
            continue
        runners[p.name] = runner
    return runners


def run_spec(runner: LlamaCppSpecRunner, prompt_id: str, ids: list[int], text: str, max_new: int,
             r: MethodResult) -> tuple[list[int], int, float]:
    """One prompt through the binary: its new ids, target forwards and seconds (the binary's own timing)."""
    out, run = runner.generate(prompt_id, ids, text, max_new)
    r.t_prefill += run.t_prefill
    r.drafted += run.drafted
    return out, run.forwards, run.seconds


def spec_summary(runner: LlamaCppSpecRunner, r: MethodResult, greedy: MethodResult | None,
                 decode: Callable[[list[int]], str]) -> dict[str, Any]:
    """What the table does not say: the binary's own counts, its prompts beside ours, its sameness to
    llamacpp_greedy (ids and text), and its decode rate with its first round counted as prefill."""
    recs = runner.records
    drafted, accepted = sum(x.n_drafted for x in recs), sum(x.n_accept for x in recs)
    after_first = r.seconds - sum(x.t_first for x in recs)
    prompts = [dict(vars(x)) for x in recs]
    same_ids = same_text = None
    if greedy is not None and greedy.ran and len(greedy.outputs) == len(recs):
        same_ids = [a == b for a, b in zip(r.outputs, greedy.outputs, strict=True)]
        same_text = [x.text == decode(g) for x, g in zip(recs, greedy.outputs, strict=True)]
        for p, ids_equal, text_equal in zip(prompts, same_ids, same_text, strict=True):
            p.update(identical_to_llamacpp_greedy=ids_equal, same_text_as_llamacpp_greedy=text_equal)
    return {
        "binary": runner.binary,
        "draft_gguf": runner.draft_gguf.name,
        "draft_max": runner.draft_max or "default (3)",
        "n_drafted": drafted,
        "n_accept": accepted,
        "acceptance": round(accepted / drafted, 4) if drafted else None,
        "prompt_tokens_match": all(x.prompt_tokens == x.our_prompt_tokens for x in recs),
        "prompt_ids_match": all(x.same_prompt_ids for x in recs),
        "pieces_retokenized": getattr(runner.piece_ids, "unmapped", None),
        "identical_to_llamacpp_greedy": None if same_ids is None else all(same_ids),
        "same_text_as_llamacpp_greedy": None if same_text is None else all(same_text),
        # The other methods' convention taken further: everything until its first new token is prefill.
        "decode_tokens_per_s_first_round_as_prefill": round(r.tokens / after_first, 3) if after_first > 0 else None,
        "prompts": prompts,
    }


def annotate_report(report: dict[str, Any], runners: dict[str, LlamaCppSpecRunner],
                    results: dict[str, MethodResult], decode: Callable[[list[int]], str]) -> None:
    """Each spec method's `spec_summary`, under ``llamacpp_spec`` in its report entry (where it ran)."""
    for name, runner in runners.items():
        if results[name].ran:
            report["methods"][name]["llamacpp_spec"] = spec_summary(
                runner, results[name], results.get("llamacpp_greedy"), decode)
