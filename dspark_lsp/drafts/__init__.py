"""Our draft sources, in one package.

* common parts: ``vocab`` (the reduced draft vocabulary and picking a token from draft logits),
  ``blocks`` (the transformer layers and KV cache both networks are built from) and ``io`` (saving,
  loading and finding draft directories, shipped ones included);
* ``token/``: the target-independent DSpark token draft (mask-token parallel step);
* ``feature/``: the feature draft, one layer over the target's own hidden states (EAGLE-style);
* ``causal_lm``: any Hugging Face causal LM that shares the target's tokenizer, as a draft;
* ``hybrid``: n-gram lookup in front of a model draft;
* ``load``: :func:`~dspark_lsp.drafts.load.load_draft_source`, a draft by name or directory.

The shipped weights sit here as data folders (``dspark-draft-qwc05/``, ``dspark-feat-qwc05/``). Drafts
implement the engine's ``DraftSource`` protocol (engine.draft); the engine never imports this package.
"""
