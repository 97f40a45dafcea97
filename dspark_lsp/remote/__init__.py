"""Completions from an OpenAI-compatible server (vLLM, SGLang, TGI, llama-server): the `backend` setting.

`config` (standard library) parses the setting, `client` speaks HTTP, `service` is the completion
service on top of them. (The feature draft's export for vLLM's EAGLE method is dspark_lsp.drafts.eagle.)
"""
