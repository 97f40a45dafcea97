"""The service's layering: the remote decoder never imports the service (imports inside functions and
type-checking ones included), both decoders sit behind one pipeline, and the stop ids are one list."""

from __future__ import annotations

import ast
from pathlib import Path

import dspark_lsp
from dspark_lsp.completion import Decoder, stop_ids
from dspark_lsp.models.fim import FimTokens

ROOT = Path(dspark_lsp.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Every package module's dspark_lsp imports, wherever in the file they stand."""
    graph: dict[str, set[str]] = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dspark_lsp"):
                deps.add(node.module)
                deps |= {f"{node.module}.{a.name}" for a in node.names}  # `from dspark_lsp import service`
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("dspark_lsp")}
        graph[name] = deps
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    todo, seen = [start], {start}
    while todo:
        mod = todo.pop()
        if mod == goal:
            return True
        for dep in graph.get(mod, set()) - seen:
            seen.add(dep)
            todo.append(dep)
    return False


def test_no_import_circle_between_the_service_and_the_remote_decoder() -> None:
    graph = _imports()
    assert "dspark_lsp.remote.service" in graph and "dspark_lsp.service" in graph
    assert _reaches(graph, "dspark_lsp.service", "dspark_lsp.remote.service")  # the service picks it
    for module in ("dspark_lsp.remote.service", "dspark_lsp.completion"):
        assert not _reaches(graph, module, "dspark_lsp.service"), module
    # And the engine still builds on no draft of ours.
    assert not any(d.startswith("dspark_lsp.drafts") for m, deps in graph.items()
                   if m.startswith("dspark_lsp.engine") for d in deps)


def test_both_decoders_satisfy_the_protocol_and_the_pipeline_is_one_class() -> None:
    from dspark_lsp.remote.service import RemoteDecoder
    from dspark_lsp.service import CompletionService, LocalDecoder, RemoteCompletionService

    wanted = {n for n in dir(Decoder) if not n.startswith("_")} | set(Decoder.__annotations__)
    for impl in (LocalDecoder, RemoteDecoder):
        have = set(dir(impl)) | set(getattr(impl, "__annotations__", {}))
        if impl is LocalDecoder:  # its target, draft and weights are set in __init__
            have |= {"target", "draft", "weights"}
        assert wanted <= have, (impl.__name__, wanted - have)
    # The remote service runs the pipeline's own __init__ (it used to skip it and copy its state).
    assert RemoteCompletionService.__init__ is CompletionService.__init__


def test_stop_ids_are_the_eos_ids_then_the_fim_markers_once_each() -> None:
    fim = FimTokens("<p>", "<s>", "<m>", prefix_id=1, suffix_id=2, middle_id=3, eos_ids=(9, 3, 8))
    assert stop_ids(fim) == (9, 3, 8, 1, 2)
