"""target_fp32's model: the target's GGUF weights dequantized to plain fp32, the reference every method's
fidelity to the file's exact arithmetic is measured against (or why there is none: not enough memory)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dspark_lsp.models.gguf_target import weights_kind


def fp32_reference(args: argparse.Namespace, spec: str, target: Any,
                   log: Callable[[str], None]) -> tuple[Any, str | None]:
    """The fp32 reference: the target itself when it already is plain fp32, else a second model (or why
    there is none: not enough memory)."""
    if is_plain_fp32(target):
        return target, None
    skip = _fp32_memory_shortfall(spec, args.cache_dir)
    if skip is not None:
        return None, skip
    from dspark_lsp.models.loader import load_causal_lm

    log(f"loading the fp32 reference {spec} (dtype float32)")
    model, _ = load_causal_lm(spec, device="cpu", dtype="float32", cache_root=args.cache_dir, pack=args.pack)
    return model, None


def is_plain_fp32(model: Any) -> bool:
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
