"""Resolve a model spec (registry name, local dir, HF id) and load it as a causal LM + tokenizer."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_lsp.errors import ModelError, ModelNotPrepared
from dspark_lsp.models import cache
from dspark_lsp.models.registry import KNOWN_MODELS

if TYPE_CHECKING:  # transformers/torch are heavy: import them only when a model is really loaded.
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# dtype "gguf": compute from the GGUF file's own quantized blocks (CPU; fp32 arithmetic on the file's exact
# weight values, ~0.52 GB of weights instead of ~2.5 GB for the 0.5B, and 3.1x faster per token than fp32 on
# this project's 2-core AVX2 CPU: bench/results/2026-12-01-s6).
QUANT_DTYPE = "gguf"
DTYPES = ("auto", "float32", "bfloat16", "float16", QUANT_DTYPE)


def _looks_like_path(spec: str) -> bool:
    """True for strings that can only be meant as a filesystem path (never an HF id like 'org/name')."""
    return spec.startswith(("/", "./", "../", "~", ".\\")) or spec in (".", "..") or os.path.isabs(spec)


def resolve_model(spec: str, cache_root: str | os.PathLike[str] | None = None) -> Path | str:
    """Where to load ``spec`` from: a prepared registry model's dir, a local dir, or an HF hub id (str)."""
    if not spec or not spec.strip():
        raise ModelError("empty model name")
    if spec in KNOWN_MODELS:
        root = cache.cache_root(cache_root)
        directory = cache.model_dir(root, spec)
        reason = cache.not_ready_reason(directory, spec, KNOWN_MODELS[spec].sha256)
        if reason is not None:
            flag = f" --cache-dir {root}" if cache_root else ""
            raise ModelNotPrepared(
                f"model {spec} is {'not prepared' if reason == 'not prepared' else 'incomplete: ' + reason}; "
                f"run: dspark-lsp models prepare {spec}{flag}"
            )
        return directory
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a directory but holds no config.json (not a Hugging Face model dir)")
        return path
    if path.exists():
        raise ModelError(f"{path} is a file; give a model directory, a registry name or a Hugging Face id")
    if _looks_like_path(spec):
        raise ModelError(f"model directory {path} does not exist")
    return spec


def pick_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is usable, else 'cpu'; anything else is passed through."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 dot-product instructions (AVX512-BF16 or AMX), read from /proc/cpuinfo."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def pick_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' -> bfloat16 on CUDA, float32 on CPU.

    bf16 would be much faster on CPUs with native bf16 instructions (measured on our AVX512-BF16 CI
    machine, Qwen2.5-Coder-0.5B, context 256: 77 ms for 1 token and 82 ms for 4, against 144 ms and
    266 ms in fp32), but a k-token verify forward rounds differently from k one-token forwards, and in
    bf16 that flips near-tie argmaxes often enough (1 prompt in 11 in our benchmark) that speculative
    output would no longer equal the target alone. Lossless is the default, so CPU stays fp32 and bf16
    is an explicit choice (`dtype: "bfloat16"`; `cpu_has_native_bf16()` says whether it pays).
    """
    import torch

    if dtype in ("auto", QUANT_DTYPE):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    try:
        return table[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}; use auto, {', '.join(table)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _from_pretrained(
    source: Path | str, torch_dtype: torch.dtype, local_only: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import sys

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # transformers draws a "Loading weights" bar on stderr; only a person at a terminal wants it (in a
    # language server's log or a script's captured stderr it is noise).
    if not sys.stderr.isatty():
        hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only)
    return model, tokenizer


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or env.strip().lower() in ("1", "true", "yes", "on")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the hub? Without this check an unreachable hub costs ~45 s of
    retries (and screens of warnings) before from_pretrained gives up."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def _load_hub_model(hub_id: str, torch_dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The HF cache first (works offline), then the network when the hub can be reached."""
    try:
        return _from_pretrained(hub_id, torch_dtype, local_only=True)
    except Exception as exc:
        cached_error = exc
    if _hub_offline() or not _hub_reachable():
        raise ModelError(
            f"could not load model {hub_id!r}: it is not a registry name or a local directory, not in the "
            f"Hugging Face cache, and huggingface.co cannot be reached ({_first_line(cached_error)})"
        )
    try:
        return _from_pretrained(hub_id, torch_dtype, local_only=False)
    except Exception as exc:
        raise ModelError(f"could not load model {hub_id!r} from the Hugging Face hub: {_first_line(exc)}") from exc


def gguf_source(spec: str, source: Path | str, cache_root: str | os.PathLike[str] | None = None) -> Path | None:
    """The GGUF file the quantized path would load for ``spec``: a registry model's kept file, or the only
    ``*.gguf`` in a local model directory; None when there is none."""
    if spec in KNOWN_MODELS:
        m = KNOWN_MODELS[spec]
        return cache.kept_gguf(cache.cache_root(cache_root), m.gguf_filename, m.size_bytes)
    if isinstance(source, Path) and source.is_dir():
        found = sorted(source.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def _load_quantized(
    spec: str, source: Path | str, dtype: str, dev: str, cache_root: str | os.PathLike[str] | None, pack: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase] | None:
    """The quantized model when it can be had; None (after one log line saying why) when ``dtype`` is
    auto and it cannot, a ModelError when ``dtype`` asked for it explicitly."""
    from dspark_lsp.quant.build import KernelUnavailable, load_kernel

    explicit = dtype == QUANT_DTYPE

    def unavailable(why: str) -> None:
        if explicit:
            raise ModelError(f"model {spec!r}: dtype {QUANT_DTYPE!r} is unavailable: {why}")
        log.warning("model %s: running fp32 weights (%s)", spec, why)

    if dev != "cpu":
        unavailable(f"the quantized kernel runs on the CPU, not {dev}")
        return None
    gguf = gguf_source(spec, source, cache_root)
    if gguf is None:
        hint = f"run `dspark-lsp models prepare {spec}` to keep its GGUF" if spec in KNOWN_MODELS else (
            "no single .gguf file beside its config.json")
        unavailable(hint)
        return None
    try:
        load_kernel(cache_root, log=log.info)
    except KernelUnavailable as exc:
        unavailable(f"the kernel cannot be built here: {exc}")
        return None
    from transformers import AutoConfig, AutoTokenizer

    from dspark_lsp.models.gguf_target import build_quantized_model
    from dspark_lsp.models.packing import pack_linears

    assert isinstance(source, Path)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception as exc:
        raise ModelError(f"could not load model {spec!r} from {source}: {_first_line(exc)}") from exc
    model, report = build_quantized_model(gguf, config, log=log.warning)
    log.info("model %s: %s from %s", spec, report.summary(), gguf.name)
    _choose_prefill_precision(spec, explicit)
    pack_linears(model, "off" if pack == "off" else "auto")  # tensors the kernel lacks, kept in fp32
    # transformers' own class (Qwen2ForCausalLM), typed by its factory as a plain Module
    return model, tokenizer  # type: ignore[return-value]


# DSPARK_PREFILL picks a prompt's products under dtype auto: int8, bf16, fp32 or auto (measurements,
# bisecting). fp32 is the exact GEMM; dtype gguf (explicit) always keeps it.
PREFILL_ENV = "DSPARK_PREFILL"
PREFILL_CHOICES = ("auto", "int8", "bf16", "fp32")
# Rows per int8 prefill block: the fastest measured (1.5B, 256-token prompt, 2 cores): 256 with VNNI
# (7.0 ms a token vs 7.5 in blocks of 64), 64 on AVX2 alone (10.6 vs 11.4 in blocks of 256).
PREFILL_INT8_ROWS_VNNI = 256
PREFILL_INT8_ROWS_AVX2 = 64


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def prefill_choice(explicit: bool, act8: bool, flags: set[str], want: str = "auto") -> str:
    """Which products a prompt's rows take: ``int8`` (the decode kernel's int8 row products, a block of
    rows at a time), ``bf16`` (weights rebuilt to bf16, torch's GEMM) or ``fp32`` (exact).

    Measured on 2 cores (bench/results/2026-12-07-int8-prefill/): without AMX the int8 rows win, 1.2x
    over the bf16 GEMM on an AVX512-BF16 Zen 4 and 1.7x over the fp32 GEMM on an AVX2 build; with AMX
    the bf16 GEMM runs at 1-2 TFLOP/s and stays. Only the prompt's rows round so: decode and verify
    rows take the same products whatever the prefill did, so speculation stays lossless."""
    if want not in PREFILL_CHOICES:
        raise ModelError(f"{PREFILL_ENV} must be one of {', '.join(PREFILL_CHOICES)}, not {want!r}")
    if explicit or want == "fp32":
        return "fp32"
    if want == "int8" and not act8:  # this kernel build has no int8 products: the best of the rest
        want = "auto"
    if want == "int8" or (want == "auto" and act8 and "amx_bf16" not in flags):
        return "int8"
    return "bf16" if flags & {"avx512_bf16", "amx_bf16"} else "fp32"


def _choose_prefill_precision(spec: str, explicit: bool) -> None:
    """Set the kernel's process-wide prefill path (``prefill_choice``) and its int8 decode switch. One
    target per process."""
    import torch

    from dspark_lsp.quant.linear import ENV_ACT8, act8_requested, apply_act8

    act8 = apply_act8()
    if act8 or act8_requested():
        log.info("model %s: decode and verify activations in %s (%s)", spec, "int8" if act8 else
                 "int16, this kernel build has no int8 products", ENV_ACT8)
    choice = prefill_choice(explicit, act8, cpu_flags(), os.environ.get(PREFILL_ENV, "auto"))
    torch.ops.dspark_q.set_prefill_bf16(choice == "bf16")
    rows = PREFILL_INT8_ROWS_VNNI if torch.ops.dspark_q.act8_vnni() else PREFILL_INT8_ROWS_AVX2
    torch.ops.dspark_q.set_prefill_int8(rows if choice == "int8" else 0)
    log.info("model %s: prefill products in %s", spec, choice)


def release_load_temporaries() -> bool:
    """Give the C heap's free pages back to the system after a load (glibc's ``malloc_trim(0)``).

    Loading leaves ~50 MB (the target: the GGUF's blocks read, parsed and packed per tensor) to ~95 MB
    (the feature draft's fp32 weights before their int8 copies) of freed heap resident, and nothing
    trims it before the first completion has run: the server's peak RSS is reached during the load and
    the load-time calibration that follows (measured on the default pair, issue 14). True when memory
    was returned; a no-op on C libraries without ``malloc_trim`` (musl, macOS).
    """
    import ctypes
    import ctypes.util

    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def load_causal_lm(
    spec: str,
    device: str = "cpu",
    dtype: str = "auto",
    cache_root: str | os.PathLike[str] | None = None,
    pack: str = "auto",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``spec`` for inference: eval mode, gradients off, on ``device`` in ``dtype``.

    On the CPU, ``auto`` (and ``gguf``) run a GGUF model from its own quantized blocks when its file is at
    hand and the kernel builds (see :mod:`dspark_lsp.quant`); otherwise fp32. ``pack`` (auto/on/off)
    pre-packs fp32 linear layers for the CPU (see :mod:`.packing`): without it a 2-token forward costs
    twice a 1-token one on our CI CPU, and speculative decoding cannot pay.
    """
    from dspark_lsp.models.packing import pack_linears

    source = resolve_model(spec, cache_root)
    dev = pick_device(device)
    if dtype == QUANT_DTYPE or (dtype == "auto" and dev == "cpu"):
        quantized = _load_quantized(spec, source, dtype, dev, cache_root, pack)
        if quantized is not None:
            release_load_temporaries()
            return quantized
    torch_dtype = pick_dtype(dtype, dev)

    if isinstance(source, Path):
        try:
            model, tokenizer = _from_pretrained(source, torch_dtype, local_only=True)
        except Exception as exc:
            raise ModelError(f"could not load model {spec!r} from {source}: {_first_line(exc)}") from exc
    else:
        model, tokenizer = _load_hub_model(source, torch_dtype)
    try:
        # Any: transformers' typing of `.to` (a decorated wrapper) confuses mypy; it returns the model.
        movable: Any = model
        movable.to(dev)
    except Exception as exc:
        raise ModelError(f"could not move model {spec!r} to device {dev!r}: {_first_line(exc)}") from exc
    model.eval()
    model.requires_grad_(False)
    try:
        pack_linears(model, pack)
    except ValueError as exc:
        raise ModelError(f"model {spec!r}: {exc}") from exc
    release_load_temporaries()
    return model, tokenizer
