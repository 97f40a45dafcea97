"""Dequantize a GGUF file through transformers and save it as safetensors + tokenizer files."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# (joined GGUF file, empty output dir, show progress) -> None. Injected in tests to skip transformers.
Converter = Callable[[Path, Path, bool], None]


@contextlib.contextmanager
def _hf_progress(enabled: bool) -> Iterator[None]:
    """Turn transformers' own tqdm bars (dequantize, write shards) on or off for the duration."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    # The GGUF dequantize bar uses tqdm directly, ignoring the switch above: silence it at its source.
    gguf_utils: Any = None
    original_tqdm: Any = None
    if not enabled:
        try:
            import transformers.modeling_gguf_pytorch_utils as gguf_utils
        except ImportError:
            gguf_utils = None
        original_tqdm = getattr(gguf_utils, "tqdm", None)
        if original_tqdm is not None:
            gguf_utils.tqdm = functools.partial(original_tqdm, disable=True)
    try:
        yield
    finally:
        if original_tqdm is not None:
            gguf_utils.tqdm = original_tqdm
        if was:
            hf_logging.enable_progress_bar()
        else:
            hf_logging.disable_progress_bar()


def gguf_to_safetensors(gguf_path: Path, out_dir: Path, progress: bool = True) -> None:
    """Load ``gguf_path`` (dequantizing to full precision) and save it in ``out_dir``.

    transformers marks a model loaded from GGUF as quantized and refuses or mangles ``save_pretrained``;
    the weights are already plain tensors after dequantizing, so we drop the quantizer state first.
    """
    # Imported here: transformers takes seconds to import and only this step needs it.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _hf_progress(progress):
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        # setattr: nn.Module's __setattr__ typing would reject plain attributes.
        setattr(model, "hf_quantizer", None)  # noqa: B010
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        setattr(model, "is_quantized", False)  # noqa: B010
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
