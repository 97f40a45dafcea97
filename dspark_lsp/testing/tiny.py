"""Tiny random target/draft models with a real byte-level BPE tokenizer that has Qwen's FIM tokens.

Engine, service and LSP tests run against these: the weights are random (the text they produce is
nonsense) but every code path — FIM prompt, KV cache, drafting, verification, stops — is the real one,
and losslessness must hold for any pair of models, random ones included.
"""

from __future__ import annotations

from pathlib import Path

FIM_SPECIALS = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|repo_name|>",
]

_TRAINING_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nfor i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "function add(a, b) {\n  return a + b;\n}\nconst x = [1, 2, 3].map((v) => v * 2);\n",
    "fn main() {\n    let v: Vec<i32> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n}\n",
    "if x == None:\n    raise ValueError('bad value')\nelse:\n    return x\n",
]


def build_tiny_tokenizer(dest: Path, vocab_size: int = 384) -> Path:
    """Train a byte-level BPE on a few lines of code and save it as an HF tokenizer directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=FIM_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TRAINING_TEXT * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|fim_pad|>")
    fast.add_special_tokens({"additional_special_tokens": FIM_SPECIALS[1:]})
    dest.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(dest))
    return dest


def build_tiny_model(
    dest: Path,
    *,
    seed: int,
    layers: int = 2,
    hidden: int = 32,
    tokenizer_dir: Path | None = None,
) -> Path:
    """Save a random Qwen2-architecture causal LM (and a copy of the tokenizer) to ``dest``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if tokenizer_dir is None:
        tokenizer_dir = build_tiny_tokenizer(dest)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    # Random init gives near-uniform logits; scaling the head makes the argmax decisive so greedy
    # decoding is stable and drafts sometimes agree with the target (realistic acceptance, not 0).
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    return dest


def build_tiny_models(dest: Path) -> tuple[Path, Path]:
    """Write ``dest/target`` and ``dest/draft`` (same tokenizer, different random weights)."""
    dest = Path(dest)
    tok_dir = build_tiny_tokenizer(dest / "tokenizer")
    target = build_tiny_model(dest / "target", seed=1, layers=2, hidden=48, tokenizer_dir=tok_dir)
    draft = build_tiny_model(dest / "draft", seed=2, layers=1, hidden=32, tokenizer_dir=tok_dir)
    return target, draft
