"""Models: the registry of named models and pairs, the on-disk cache, `prepare`, and loading.

registry.py (names, pinned sources) · cache.py (layout, manifest, readiness) · parts.py (part packages)
· prepare.py (install, join, verify, convert) · convert.py (GGUF -> safetensors) · loader.py (resolve and
load a causal LM) · fim.py (FIM tokens of a tokenizer) · cli.py (`dspark-lsp models prepare|list`).
Nothing here imports torch or transformers at module import time except where a model is really loaded.
"""
