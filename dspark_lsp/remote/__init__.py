"""Completions from an OpenAI-compatible server (vLLM, SGLang, TGI, llama-server): the `backend` setting.

`config` (standard library) parses the setting, `client` speaks HTTP, `service` is the completion
service on top of them; `eagle` exports the feature draft for vLLM's EAGLE speculative method.
"""
