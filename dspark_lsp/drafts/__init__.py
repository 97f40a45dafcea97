"""Our draft sources, in one package.

* common parts: ``vocab`` (the reduced draft vocabulary and picking a token from draft logits),
  ``blocks`` (the transformer layers and KV cache both networks are built from) and ``io`` (saving,
  loading and finding draft directories, shipped ones included);
* ``token/``: the target-independent DSpark token draft (mask-token parallel step);
* ``feature/``: the feature draft, one layer over the target's own hidden states (EAGLE-style);
* ``causal_lm``: any Hugging Face causal LM that shares the target's tokenizer, as a draft;
* ``ngram``: prompt lookup (n-gram matches in the context and the request's corpus), no model;
* ``chain``: an ordered chain of sources, the first confident one answering; ``hybrid``: n-gram lookup
  in front of a model draft, the chain the service drafts with;
* ``registry``: the table of draft kinds and :func:`~dspark_lsp.drafts.registry.build_draft`, the one
  place drafts are built from a spec (service, bench, offline replays);
* ``eagle``: `dspark-lsp export-eagle`, the feature draft as a checkpoint for vLLM's EAGLE method.

The shipped weights sit here as data folders (``dspark-draft-qwc05/``, ``dspark-feat-qwc05/``). Drafts
implement the engine's ``DraftSource`` protocol (engine.draft); the engine never imports this package.
"""
