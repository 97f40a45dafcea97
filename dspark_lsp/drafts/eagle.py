"""`dspark-lsp export-eagle DIR`: the feature draft as a checkpoint vLLM's EAGLE method loads.

What vLLM 0.32's EAGLE-1 draft (`EagleLlamaForCausalLM`, model_executor/models/llama_eagle.py) computes,
for target feature f (the target model's output after its final norm) and next-token embedding e:

    x = fc([e; f])                       # no norms before fc
    r = x;  a = attn(x)                  # layer 0 has no input norm
    r = r + a;  m = mlp(norm2(r))
    g = m + r                            # returned as logits input AND as the next step's feature
    logits = target.lm_head(g)           # the target's own head, over the full vocabulary

Ours (drafts/feature/model.py): x = fc([norm_e(e); norm_f(f)]), a = attn(norm1(x)), the same residuals and
MLP, g predicted towards f_next (smooth-L1), logits = head(g) over a reduced vocabulary. The export:

* norm_e: exact. The checkpoint carries its own `embed_tokens`, the target's table with norm_e applied
  row by row (vLLM keeps a draft's own table when it differs from the target's).
* norm_f: approximate. Its weight folds into fc; its per-token 1/rms(f) becomes one constant measured
  on the target's features (least squares: E[rms] / E[rms^2]).
* norm1 (before attention): approximate the same way (weight and a constant into q/k/v).
* head: not expressible. vLLM's EAGLE-1 has no lm_head of its own and uses the target's on g; ours is a
  reduced-vocabulary head (vLLM's EAGLE-3 has that, `d2t`, but a different layer: embeddings and the
  feature go straight into q/k/v with the feature as the residual, and no fc before the layer).
* rope: theta from feat_config; vLLM uses the target's positions, ours positions offset by one at most
  (RoPE is relative, so a constant offset changes nothing).
* block step, Markov and confidence heads of newer drafts: not expressible; dropped.

`measure` runs both forwards (ours and the exported EAGLE math, written out here in torch from the
checkpoint file itself) over held-out text and reports how often each one's first proposal equals the
target's greedy next token, and how often they agree.

`--tune-steps N` then trains the exported layer itself in that exact math (the nearest vLLM-compatible
head, as issue 18 allows): every tensor but the embedding table, from the conversion as the start, on the
target's features over training-corpus text (never bench/corpus, which the measurement and the bench
prompts come from), with cross-entropy through the target's own lm_head over the full vocabulary for the
first and the second drafted token (the second reads the layer's own g, as vLLM's chain does).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspark_lsp.errors import UserError

WEIGHTS, CONFIG, REPORT = "model.safetensors", "config.json", "dspark-eagle.json"


@dataclass
class Constants:
    feature_scale: float  # replaces 1/rms(f) of norm_f
    attn_scale: float  # replaces 1/rms(x) of the layer's attention pre-norm
    tokens: int  # how many target positions they were measured on


@dataclass
class Fidelity:
    positions: int
    ours_first_accept: float  # our draft's first proposal == the target's greedy next token
    eagle_first_accept: float  # the exported EAGLE math's first proposal == it
    agree: float  # the two proposals are the same token
    ours_second_accept: float  # first AND second proposal right (the second reads the draft's own g)
    eagle_second_accept: float


# ---------------------------------------------------------------------------------------- loading
def _target_tensors(target_dir: Path, names: tuple[str, ...]) -> dict[str, Any]:
    from safetensors import safe_open

    files = sorted(target_dir.glob("*.safetensors"))
    out: dict[str, Any] = {}
    for f in files:
        with safe_open(str(f), "pt") as st:
            for n in names:
                if n in st.keys():  # noqa: SIM118 - safe_open has keys(), not __contains__
                    out[n] = st.get_tensor(n).float()
    missing = [n for n in names if n not in out]
    if missing:
        raise UserError(f"{target_dir} has no {', '.join(missing)} in its safetensors files")
    return out


def _rms(x: Any, eps: float) -> Any:
    return (x.float().pow(2).mean(-1, keepdim=True) + eps).sqrt()


def _norm_weightless(x: Any, eps: float) -> Any:
    return x.float() / _rms(x, eps)


def calibration_ids(
    tokenizer: Any, texts: list[str], tokens: int, window: int = 256, per_text: int | None = None
) -> list[list[int]]:
    """Token windows of ``window`` ids from ``texts`` until ``tokens`` ids are collected, at most
    ``per_text`` windows from one text (None: as many as it has)."""
    out: list[list[int]] = []
    total = 0
    for text in texts:
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        for n, i in enumerate(range(0, max(0, len(ids) - 16), window)):
            if per_text is not None and n >= per_text:
                break
            chunk = ids[i : i + window]
            if len(chunk) >= 16:
                out.append(chunk)
                total += len(chunk)
            if total >= tokens:
                return out
    return out


def corpus_texts(root: Path, limit_bytes: int = 400_000) -> list[str]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".cpp"})
    texts = []
    for p in files:
        if p.stat().st_size < limit_bytes:
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
    return texts


# -------------------------------------------------------------------------------------- the math
def measure_constants(draft: Any, feats: list[Any], embeds: list[Any]) -> Constants:
    """Least-squares constants for the two per-token rms divisions the EAGLE layout has no room for."""
    import torch

    eps = draft.cfg.norm_eps
    rms_f, rms_x = [], []
    with torch.inference_mode():
        for f, e in zip(feats, embeds, strict=True):
            x = draft.fc(torch.cat([draft.norm_e(e), draft.norm_f(f)], -1).float())
            rms_f.append(_rms(f, eps).flatten())
            rms_x.append(_rms(x, eps).flatten())
    rf, rx = torch.cat(rms_f), torch.cat(rms_x)
    return Constants(
        feature_scale=float(rf.mean() / rf.pow(2).mean()),
        attn_scale=float(rx.mean() / rx.pow(2).mean()),
        tokens=int(rf.numel()),
    )


def eagle_state(draft: Any, embed: Any, consts: Constants) -> dict[str, Any]:
    """The EAGLE-1 checkpoint's tensors (names as vLLM's llama_eagle loads them), fp32."""
    import torch

    cfg = draft.cfg
    if cfg.n_layers != 1:
        raise UserError(f"vLLM's EAGLE-1 layout has one decoder layer; this draft has {cfg.n_layers}")
    if cfg.width != cfg.d_model:
        raise UserError(f"vLLM's EAGLE-1 layer is as wide as the target's features ({cfg.width}); this draft's is {cfg.d_model}")
    d, eps = cfg.d_model, cfg.norm_eps
    w_e, w_f = draft.norm_e.weight.float(), draft.norm_f.weight.float()
    fc = draft.fc.weight.float()  # [d, 2d]: columns for norm_e(e), then for norm_f(f)
    block = draft.blocks[0]
    qkv = block.attn.qkv.weight.float() * (block.norm1.weight.float() * consts.attn_scale)[None, :]
    gate_up = block.gate_up.weight.float()
    d_ff = gate_up.shape[0] // 2
    with torch.inference_mode():
        table = _norm_weightless(embed, eps) * w_e[None, :]
    return {
        "embed_tokens.weight": table,
        "fc.weight": torch.cat([fc[:, :d], fc[:, d:] * (w_f * consts.feature_scale)[None, :]], dim=1),
        "layers.0.self_attn.q_proj.weight": qkv[:d],
        "layers.0.self_attn.k_proj.weight": qkv[d : 2 * d],
        "layers.0.self_attn.v_proj.weight": qkv[2 * d :],
        "layers.0.self_attn.o_proj.weight": block.attn.out.weight.float(),
        "layers.0.post_attention_layernorm.weight": block.norm2.weight.float(),
        "layers.0.mlp.gate_proj.weight": gate_up[:d_ff],
        "layers.0.mlp.up_proj.weight": gate_up[d_ff:],
        "layers.0.mlp.down_proj.weight": block.down.weight.float(),
    }


def eagle_config(draft_cfg: Any, target_config: dict[str, Any]) -> dict[str, Any]:
    """A Llama config.json vLLM's EAGLE method turns into EagleLlamaForCausalLM."""
    heads = draft_cfg.n_heads
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": draft_cfg.d_model,
        "intermediate_size": draft_cfg.d_ff,
        "num_hidden_layers": draft_cfg.n_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": draft_cfg.d_model // heads,
        "hidden_act": "silu",
        "rms_norm_eps": draft_cfg.norm_eps,
        "rope_theta": draft_cfg.rope_theta,
        "rope_parameters": {"rope_theta": draft_cfg.rope_theta, "rope_type": "default"},
        "max_position_embeddings": int(target_config.get("max_position_embeddings", 32768)),
        "vocab_size": int(target_config["vocab_size"]),
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": target_config.get("bos_token_id"),
        "eos_token_id": target_config.get("eos_token_id"),
        "torch_dtype": "bfloat16",
    }


def eagle_forward(
    state: dict[str, Any], cfg: dict[str, Any], ids: Any, feats: Any, positions: Any, mask: Any = None
) -> Any:
    """vLLM's EAGLE-1 Llama draft over one sequence, in plain torch, from checkpoint tensors: ids [T],
    feats [T, d], positions [T], mask bool [T, T] (True = may attend; None = causal) -> g [T, d]."""
    import torch
    import torch.nn.functional as F

    d, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    hd = d // heads
    eps, theta = float(cfg["rms_norm_eps"]), float(cfg["rope_theta"])
    p = {k: v.float() for k, v in state.items()}
    e = p["embed_tokens.weight"][ids]
    x = torch.cat([e, feats.float()], -1) @ p["fc.weight"].T
    t = x.shape[0]

    def split(w: Any) -> Any:
        return (x @ w.T).view(t, heads, hd).transpose(0, 1)  # [H, T, hd]

    q, k, v = (split(p[f"layers.0.self_attn.{n}_proj.weight"]) for n in "qkv")
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = positions.float()[:, None] * inv[None, :]
    cos, sin = ang.cos()[None], ang.sin()[None]

    def rope(z: Any) -> Any:
        z1, z2 = z.chunk(2, -1)
        return torch.cat([z1 * cos - z2 * sin, z2 * cos + z1 * sin], -1)

    if mask is None:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    a = F.scaled_dot_product_attention(rope(q)[None], rope(k)[None], v[None], attn_mask=mask[None, None])[0]
    r = x + a.transpose(0, 1).reshape(t, d) @ p["layers.0.self_attn.o_proj.weight"].T
    h = _norm_weightless(r, eps) * p["layers.0.post_attention_layernorm.weight"]
    m = (F.silu(h @ p["layers.0.mlp.gate_proj.weight"].T) * (h @ p["layers.0.mlp.up_proj.weight"].T)) @ p[
        "layers.0.mlp.down_proj.weight"
    ].T
    return m + r


def second_step_mask(n: int) -> Any:
    """Bool [2n, 2n] for n true draft positions followed by n drafted ones: true rows are causal among
    themselves; drafted row i (the step after true position i) sees true positions 0..i and itself."""
    import torch

    mask = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
    mask[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    mask[n:, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    mask[n:, n:] = torch.eye(n, dtype=torch.bool)
    return mask


def measure(draft: Any, vocab: Any, embed: Any, state: dict[str, Any], cfg: dict[str, Any], lm_head: Any,
            seqs: list[tuple[Any, Any, Any]]) -> Fidelity:
    """(ids [T], feats [T, d], target greedy [T]) per sequence, every position a draft start: how often
    the first proposal of each draft (ours; the exported EAGLE math) is the target's greedy token, and
    how often the first two both are (the second step reads the draft's own predicted feature)."""
    import torch

    from dspark_lsp.drafts.vocab import N_RESERVED

    def ours_tokens(g: Any) -> Any:
        logits = draft.head(g).float()
        logits[:, :N_RESERVED] = float("-inf")
        return vocab.to_target[logits.argmax(-1)]

    n = agree = ours1 = eag1 = ours2 = eag2 = 0
    with torch.inference_mode():
        for ids, feats, greedy in seqs:
            t = ids.shape[0] - 2  # starts j = 0 .. T-3: position j reads (f_j, ids[j+1]), wants greedy[j+1]
            if t < 2:
                continue
            inp, f, pos = ids[1 : t + 1], feats[:t].float(), torch.arange(t)
            want1, want2 = greedy[1 : t + 1], greedy[2 : t + 2]
            g = draft(embed[inp][None], f[None], pos[None])[0]
            ge = eagle_forward(state, cfg, inp, f, pos)
            p1_ours, p1_eag = ours_tokens(g), (ge @ lm_head.T).argmax(-1)
            # The second step after start j: (own g_j, token want1[j]) at position j + 1.
            mask = second_step_mask(t)
            inp2, pos2 = torch.cat([inp, want1]), torch.cat([pos, pos + 1])
            g2 = draft(embed[inp2][None], torch.cat([f, g])[None], pos2[None], mask[None, None])[0][t:]
            ge2 = eagle_forward(state, cfg, inp2, torch.cat([f, ge]), pos2, mask)[t:]
            p2_ours, p2_eag = ours_tokens(g2), (ge2 @ lm_head.T).argmax(-1)
            n += t
            ours1 += int((p1_ours == want1).sum())
            eag1 += int((p1_eag == want1).sum())
            agree += int((p1_ours == p1_eag).sum())
            ours2 += int(((p1_ours == want1) & (p2_ours == want2)).sum())
            eag2 += int(((p1_eag == want1) & (p2_eag == want2)).sum())
    if n == 0:
        raise UserError("no calibration text long enough to measure on")
    return Fidelity(
        positions=n,
        ours_first_accept=round(ours1 / n, 4),
        eagle_first_accept=round(eag1 / n, 4),
        agree=round(agree / n, 4),
        ours_second_accept=round(ours2 / n, 4),
        eagle_second_accept=round(eag2 / n, 4),
    )


# ----------------------------------------------------------------------------------------- tuning
@dataclass
class Tuning:
    steps: int
    lr: float
    windows: int  # training windows of target features
    tokens: int
    loss_first: float  # mean of the first / last tenth of the steps (first + second token)
    loss_last: float
    seconds: float


def tuning_texts(files: int, seed: int) -> list[str]:
    """Source text from the training roots' training split (the drafts' own training data, never the
    held-out files nor bench/corpus), ``files`` files drawn at random."""
    from dspark_lsp.training.corpus import (
        C_FAMILY_SUFFIXES,
        collect,
        default_roots,
        extra_language_roots,
        is_held_out,
        read_text,
    )

    pool = collect(default_roots()) + collect(extra_language_roots(), C_FAMILY_SUFFIXES + (".ts",))
    pool = [f for f in pool if not is_held_out(f.key, 5.0)]
    random.Random(seed).shuffle(pool)
    texts: list[str] = []
    for f in pool:
        if len(texts) >= files:
            break
        if (t := read_text(f.path)) and len(t) > 2000:
            texts.append(t)
    return texts


def tune_state(
    state: dict[str, Any], cfg: dict[str, Any], lm_head: Any, seqs: list[tuple[Any, Any, Any]], *, steps: int,
    lr: float = 5e-5, window: int = 128, seed: int = 0, progress: Any = None,
) -> tuple[dict[str, Any], list[float]]:
    """Train the exported tensors (all but ``embed_tokens``) in ``eagle_forward``'s math: per step one
    ``window`` of positions of one sequence, cross-entropy of ``g @ lm_head.T`` against the target's
    greedy next token for the first drafted token and for the second (which reads the first step's g at
    the next position, given the true first token). Returns the new state and the loss per step."""
    import torch
    import torch.nn.functional as F

    say = progress or (lambda message: None)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    # Clones: the export makes its tensors under inference_mode, which autograd may not save.
    fixed = {"embed_tokens.weight": state["embed_tokens.weight"].float().clone()}
    params = {k: v.detach().float().clone().requires_grad_(True) for k, v in state.items() if k not in fixed}
    opt = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=0.0)
    head = lm_head.float().clone()
    usable = [(i.clone(), f.clone(), g.clone()) for i, f, g in seqs if i.shape[0] >= 8]
    if not usable:
        raise UserError("no tuning text long enough")
    losses: list[float] = []
    for step in range(steps):
        ids, feats, greedy = usable[rng.randrange(len(usable))]
        t = min(window, ids.shape[0] - 2)
        start = rng.randint(0, ids.shape[0] - 2 - t)
        inp, f = ids[start + 1 : start + t + 1], feats[start : start + t].float()
        want1, want2 = greedy[start + 1 : start + t + 1], greedy[start + 2 : start + t + 2]
        pos = torch.arange(start, start + t)
        cur = {**fixed, **params}
        g = eagle_forward(cur, cfg, inp, f, pos)
        g2 = eagle_forward(cur, cfg, torch.cat([inp, want1]), torch.cat([f, g]), torch.cat([pos, pos + 1]),
                           second_step_mask(t))[t:]
        loss = F.cross_entropy(g @ head.T, want1) + F.cross_entropy(g2 @ head.T, want2)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        say(f"tune {step + 1}/{steps} loss {losses[-1]:.3f}")
    return {**fixed, **{k: v.detach() for k, v in params.items()}}, losses


def target_sequences(tmodel: Any, windows: list[list[int]], say: Any, label: str) -> list[tuple[Any, Any, Any]]:
    """(ids, the target's last hidden states, its greedy next tokens) per window."""
    import torch

    seqs: list[tuple[Any, Any, Any]] = []
    with torch.inference_mode():
        for i, w in enumerate(windows):
            x = torch.tensor([w])
            o = tmodel(input_ids=x, output_hidden_states=True, use_cache=False)
            seqs.append((x[0], o.hidden_states[-1][0].float(), o.logits[0].argmax(-1)))
            say(f"{label} {i + 1}/{len(windows)}")
    return seqs


# --------------------------------------------------------------------------------------- export
@dataclass
class _Pair:
    """The feature draft and what the export reads of its target."""

    where: Path  # the draft's directory
    model: Any  # FeatDraft
    vocab: Any  # DraftVocab
    target_name: str
    target_dir: Path
    target_config: dict[str, Any]
    embed: Any  # the target's embedding table (fp32)
    lm_head: Any  # the target's output head (fp32)


def _load_pair(draft: str, target: str, cache_dir: str | None) -> _Pair:
    """The feature draft ``draft`` and its target's config, embedding table and head, checked to fit."""
    from dspark_lsp.drafts.io import is_feat_draft_dir, load_feat_draft, trained_draft_dir
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.models.registry import pair_for

    where = trained_draft_dir(draft) or Path(draft).expanduser()
    if not is_feat_draft_dir(Path(where)):
        raise UserError(f"{draft} is not a feature draft (no feat_config.json); only feature drafts export to EAGLE")
    model, vocab, _meta = load_feat_draft(Path(where))
    target_name = pair_for(target, None).target
    target_dir = Path(resolve_model(target_name, cache_dir))
    if not isinstance(resolve_model(target_name, cache_dir), Path):
        raise UserError("the target must be a local model directory (a prepared model or a path)")
    target_config = json.loads((target_dir / "config.json").read_text())
    if int(target_config.get("hidden_size", -1)) != model.cfg.d_model:
        raise UserError(f"the draft reads {model.cfg.d_model}-wide features; {target_name} has {target_config.get('hidden_size')}")
    weights = _target_tensors(target_dir, ("model.embed_tokens.weight", "lm_head.weight"))
    return _Pair(Path(where), model, vocab, target_name, target_dir, target_config,
                 weights["model.embed_tokens.weight"], weights["lm_head.weight"])


def _tune(pair: _Pair, state: dict[str, Any], cfg: dict[str, Any], tmodel: Any, tokenizer: Any,
          held: list[tuple[Any, Any, Any]], say: Any, *, steps: int, tokens: int, lr: float
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``state`` trained ``steps`` steps further in the EAGLE math on training text, and the report's
    tuning entries (what was trained on, its loss, the held-out fidelity after it)."""
    t0 = time.perf_counter()
    # Two windows a file at most: the draw spreads over many files and languages (without the cap a
    # single long header filled most of it).
    windows_t = calibration_ids(tokenizer, tuning_texts(400, 0), tokens, per_text=2)
    train = target_sequences(tmodel, windows_t, say, "tuning features")
    state, losses = tune_state(state, cfg, pair.lm_head, train, steps=steps, lr=lr, progress=say)
    tenth = max(1, len(losses) // 10)
    tuning = Tuning(steps=steps, lr=lr, windows=len(train), tokens=sum(int(s[0].shape[0]) for s in train),
                    loss_first=round(sum(losses[:tenth]) / tenth, 4), loss_last=round(sum(losses[-tenth:]) / tenth, 4),
                    seconds=round(time.perf_counter() - t0, 1))
    fidelity = measure(pair.model, pair.vocab, pair.embed, state, cfg, pair.lm_head, held)
    return state, {"tuning": asdict(tuning), "fidelity_held_out_tuned": asdict(fidelity)}


def _report(pair: _Pair, consts: Constants, fidelity: Fidelity, tuned: dict[str, Any], seconds: float
            ) -> dict[str, Any]:
    """dspark-eagle.json: what was exported from what, how faithful it is, and every difference."""
    dropped = [n for n in ("block_size", "markov_rank", "confidence_head") if getattr(pair.model.cfg, n, 0)]
    return {
        "draft": str(pair.where),
        "target": str(pair.target_dir),
        "layout": "vLLM EAGLE-1 (EagleLlamaForCausalLM): method 'eagle'",
        "constants": asdict(consts),
        "fidelity_held_out": asdict(fidelity),
        **tuned,
        "dropped": dropped,
        "seconds": round(seconds, 1),
        "differences": [
            "norm_e: exact (embed_tokens = the target's table with norm_e applied)",
            "norm_f: weight folded into fc, 1/rms(f) replaced by constants.feature_scale",
            "layer pre-attention norm: weight folded into q/k/v, 1/rms(x) replaced by constants.attn_scale",
            "head: the target's lm_head on g (vLLM's EAGLE-1 has no head of its own); ours is a reduced-vocabulary head",
            "block step / Markov / confidence heads: not expressible, dropped" if dropped else "no extra heads",
            *(["tuned: every tensor but embed_tokens trained further in the EAGLE math (see tuning)"] if tuned else []),
        ],
    }


def _write(out: Path, state: dict[str, Any], cfg: dict[str, Any], report: dict[str, Any]) -> None:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(cfg, indent=2))
    (out / REPORT).write_text(json.dumps(report, indent=2))


def export_eagle(
    out: Path,
    *,
    draft: str = "dspark-feat-qwc05",
    target: str = "qwen2.5-coder-0.5b",
    cache_dir: str | None = None,
    calibration_tokens: int = 2048,
    corpus: Path | None = None,
    dtype: str = "auto",
    progress: Any = None,
    tune_steps: int = 0,
    tune_tokens: int = 16384,
    tune_lr: float = 5e-5,
) -> dict[str, Any]:
    """Convert the feature draft ``draft`` for ``target`` into ``out`` (see the module's docstring):
    constants measured on half of the calibration windows, fidelity on the other half, then optionally
    ``tune_steps`` of training in the EAGLE math. Returns the report it writes beside the checkpoint."""
    from dspark_lsp.models.loader import load_causal_lm

    say = progress or (lambda message: None)
    pair = _load_pair(draft, target, cache_dir)
    say(f"loading {pair.target_name} for its features")
    tmodel, tokenizer = load_causal_lm(pair.target_name, device="cpu", dtype=dtype, cache_root=cache_dir, pack="off")
    root = corpus or Path(__file__).resolve().parents[2] / "bench" / "corpus"
    texts = corpus_texts(root)
    if not texts:
        raise UserError(f"no source files under {root} to calibrate on")
    windows = calibration_ids(tokenizer, texts, 2 * calibration_tokens)
    half = max(1, len(windows) // 2)
    started = time.perf_counter()
    seqs = target_sequences(tmodel, windows, say, "target features")
    calib, held = seqs[:half], seqs[half:] or seqs[:half]
    consts = measure_constants(pair.model, [f[:-1] for _i, f, _g in calib], [pair.embed[i[1:]] for i, _f, _g in calib])
    state = eagle_state(pair.model, pair.embed, consts)
    cfg = eagle_config(pair.model.cfg, pair.target_config)
    fidelity = measure(pair.model, pair.vocab, pair.embed, state, cfg, pair.lm_head, held)
    tuned: dict[str, Any] = {}
    if tune_steps > 0:
        state, tuned = _tune(pair, state, cfg, tmodel, tokenizer, held, say, steps=tune_steps, tokens=tune_tokens,
                             lr=tune_lr)
    report = _report(pair, consts, fidelity, tuned, time.perf_counter() - started)
    _write(out, state, cfg, report)
    return report


def add_export_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export-eagle", help="export the feature draft as a vLLM EAGLE checkpoint (see README, For teams)")
    p.add_argument("out", help="output directory (config.json, model.safetensors, dspark-eagle.json)")
    p.add_argument("--draft", default="dspark-feat-qwc05", help="a shipped feature draft name or its directory")
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="the target the draft was trained on (the 0.5B for dspark-feat-qwc05)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--dtype", default="auto", help="the target's dtype for the calibration features")
    p.add_argument("--calibration-tokens", type=int, default=2048, help="target positions for the constants")
    p.add_argument("--corpus", default=None, help="source files to calibrate on (default: bench/corpus)")
    p.add_argument("--tune-steps", type=int, default=0,
                   help="then train the exported layer this many steps in vLLM's EAGLE math (0: pure conversion)")
    p.add_argument("--tune-tokens", type=int, default=16384, help="target positions of training text to tune on")
    p.add_argument("--tune-lr", type=float, default=5e-5)
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    import sys

    if args.calibration_tokens < 64:
        raise UserError("--calibration-tokens must be at least 64")
    if args.tune_steps < 0 or (args.tune_steps and args.tune_tokens < 64):
        raise UserError("--tune-steps must be >= 0 and --tune-tokens at least 64")
    report = export_eagle(
        Path(args.out), draft=args.draft, target=args.model, cache_dir=args.cache_dir,
        calibration_tokens=args.calibration_tokens, corpus=Path(args.corpus) if args.corpus else None,
        dtype=args.dtype, progress=lambda m: print(f"export-eagle: {m}", file=sys.stderr) if sys.stderr.isatty() else None,
        tune_steps=args.tune_steps, tune_tokens=args.tune_tokens, tune_lr=args.tune_lr,
    )
    keys = ("layout", "constants", "fidelity_held_out", "tuning", "fidelity_held_out_tuned", "dropped")
    print(json.dumps({k: report[k] for k in keys if k in report}, indent=2))
    return 0


__all__ = ["add_export_parser", "eagle_forward", "eagle_state", "export_eagle", "tune_state"]
