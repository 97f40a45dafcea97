"""Every knob of ``dspark-lsp train-draft`` in one dataclass (the CLI is generated from its fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


def _default_tokenizer() -> str:
    prepared = Path("~/.cache/dspark-lsp/models/qwen2.5-coder-0.5b").expanduser()
    return str(prepared if (prepared / "tokenizer.json").is_file() else Path("/tmp/prep/out"))


@dataclass
class TrainConfig:
    name: str = field(default="dspark-draft-qwc05", metadata={"help": "run name (directory under --runs-dir)"})
    runs_dir: str = field(default="runs", metadata={"help": "where runs, checkpoints and logs live"})
    tokenizer: str = field(default_factory=_default_tokenizer,
                           metadata={"help": "target model dir (or tokenizer.json) whose tokenizer to use"})
    corpus: list[str] = field(default_factory=list,
                              metadata={"help": "source dirs (default: stdlib, npm, permissive site-packages)"})
    max_files: int = field(default=0, metadata={"help": "use at most this many files (0 = all; for tests)"})
    held_out_percent: float = field(default=5.0, metadata={"help": "percentage of files held out (by path hash)"})
    keep_tokens: int = field(default=8192, metadata={"help": "reduced vocabulary: most frequent target tokens"})
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 704
    n_parallel: int = field(default=4, metadata={"help": "tokens one masked parallel step proposes"})
    anchors: int = field(default=16, metadata={"help": "mask blocks appended per sample"})
    parallel_weight: float = field(default=1.0, metadata={"help": "weight of the masked-parallel loss"})
    seq_len: int = field(default=324, metadata={"help": "real tokens per sample (FIM prompt + hole)"})
    fim_rate: float = 0.8
    batch_size: int = 8
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.05
    max_steps: int = field(default=4000, metadata={"help": "total optimiser steps (the lr schedule length)"})
    max_minutes: float = field(default=0.0, metadata={"help": "stop this invocation after N minutes (0 = no)"})
    checkpoint_minutes: float = 4.0
    eval_every: int = 100
    eval_samples: int = 48
    log_every: int = 10
    bf16: bool = field(default=True, metadata={"help": "bf16 autocast for matmuls (~1.35x on AVX512-BF16 CPUs)"})
    threads: int = field(default=1, metadata={"help": "torch threads (the CPU is shared)"})
    seed: int = 0
    target_vocab_size: int = field(default=0, metadata={"help": "0 = from the tokenizer dir's config.json"})

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name
