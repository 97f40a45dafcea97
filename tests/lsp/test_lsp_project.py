"""ProjectContext (the language server's view of the project): names in the prompt, and a context that
stays put while the cursor stays in one block of lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dspark_lsp.lsp.project import ProjectContext


@dataclass
class Cfg:
    context_budget: int = 1024
    context_open_files: bool = True
    context_definitions: bool = True


def test_prompt_names_and_sticky_context(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    util = tmp_path / "pkg" / "util.py"
    util.write_text("def add(a, b):\n    return a + b\n\n\ndef scale(x, k):\n    return x * k\n", encoding="utf-8")
    project = ProjectContext()
    project.set_roots([tmp_path.as_uri()])
    assert project.workspace is not None and project.workspace.wait(10)
    main = (tmp_path / "pkg" / "main.py").as_uri()
    assert project.prompt_path(main) == "pkg/main.py" and project.repo_name(main) == tmp_path.name
    head = "from .util import add, scale\n\n\ndef run(x):\n"
    first = project.for_request(main, head + "    y = add(", len(head) + 12, "python", Cfg()).context
    assert [p.path for p in first] == ["pkg/util.py"] and "def add(a, b)" in first[0].text
    # Typing on without a new name: the very same pieces (the prompt's head, so its KV, unchanged).
    typed = head + "    y = add(x, 1)\n    z = 2 * y + x"
    assert project.for_request(main, typed, len(typed), "python", Cfg()).context == first
    # A second imported name: what the new definition brings comes in.
    doc = head + "    y = add(x, 1)\n    z = scale("
    second = project.for_request(main, doc, len(doc), "python", Cfg()).context
    assert "def scale(x, k)" in "".join(p.text for p in second)
    # Off: nothing, whatever was gathered before.
    assert project.for_request(main, doc, len(doc), "python", Cfg(context_budget=0)).context == ()
    project.close()


def test_open_documents_outside_folders_use_their_file_name(tmp_path: Path) -> None:
    project = ProjectContext()
    other = (tmp_path / "other.py").as_uri()
    project.opened(other, "".join(f"value_{i} = compute_total(order_{i})\n" for i in range(40)), "python")
    main = (tmp_path / "main.py").as_uri()
    doc = "".join(f"result_{i} = compute_total(order_{i})\n" for i in range(20)) + "x = "
    pieces = project.for_request(main, doc, len(doc), "python", Cfg(context_definitions=False)).context
    assert pieces and {p.path for p in pieces} == {"other.py"} and project.workspace is None
    project.closed(other)
    assert project.for_request(main, doc, len(doc), "python", Cfg(context_definitions=False)).context == ()


def test_sticky_keeps_order_within_a_block_and_starts_over_in_another() -> None:
    from dspark_lsp.context.types import ContextFile

    a, b, c = (ContextFile(n, n * 3, "open") for n in "abc")
    project = ProjectContext()
    assert project._sticky("u", 0, (a, b)) == (a, b)
    assert project._sticky("u", 0, (b, a, c)) == (a, b, c)  # a re-ranking does not reorder; c is new
    # A piece no longer gathered stays while the cursor stays in the block: dropping it would change the
    # prompt's head and re-prefill the whole window (the replay's 2.5 s tail request).
    assert project._sticky("u", 0, (c, b)) == (a, b, c)
    assert project._sticky("u", 1, (c, a)) == (c, a)  # another block: as gathered
    # The same file's piece: kept when the new one says less, replaced in place when it says more.
    short, longer = ContextFile("d", "def f(): ...\n", "definition"), ContextFile("d", "def f(): ...\ndef g(): ...\n",
                                                                               "definition")  # fmt: skip
    assert project._sticky("v", 0, (a, longer)) == (a, longer)
    assert project._sticky("v", 0, (short,)) == (a, longer)
    assert project._sticky("v", 0, (short, b)) == (a, longer, b)
    assert project._sticky("w", 0, (short, a)) == (short, a)
    assert project._sticky("w", 0, (longer,)) == (longer, a)


@dataclass
class LangCfg(Cfg):
    context_open_files: bool = False
    context_definition_languages: str = "python,go"


def test_definitions_only_for_the_languages_the_setting_names(tmp_path: Path) -> None:
    """contextDefinitionLanguages: a TypeScript file gets no definitions under the default "python,go" (they
    cost TypeScript on the repository-level set), and gets them under "*" or a list naming it."""
    (tmp_path / "util.py").write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    (tmp_path / "util.ts").write_text("export function add(a: number, b: number): number {\n  return a + b\n}\n",
                                      encoding="utf-8")  # fmt: skip
    project = ProjectContext()
    project.set_roots([tmp_path.as_uri()])
    assert project.workspace is not None and project.workspace.wait(10)
    py_doc, ts_doc = "from util import add\n\nadd(", 'import { add } from "./util"\n\nadd('
    py_uri, ts_uri = (tmp_path / "main.py").as_uri(), (tmp_path / "main.ts").as_uri()

    def paths(uri: str, doc: str, lang: str, cfg: Cfg) -> list[str]:
        return [p.path for p in project.for_request(uri, doc, len(doc), lang, cfg).context]

    assert paths(py_uri, py_doc, "python", LangCfg()) == ["util.py"]
    assert paths(ts_uri, ts_doc, "typescript", LangCfg()) == []
    assert paths(ts_uri, ts_doc, "typescript", LangCfg(context_definition_languages="*")) == ["util.ts"]
    assert paths(ts_uri, ts_doc, "typescript", LangCfg(context_definition_languages="go, typescript")) == ["util.ts"]
    assert paths(py_uri, py_doc, "python", LangCfg(context_definition_languages="typescript")) == []
    project.close()


def test_a_bad_language_list_is_refused_with_its_default() -> None:
    from dspark_lsp.settings_schema import validate

    kept, problems = validate({"contextDefinitionLanguages": "Python!"})
    assert kept == {} and problems == [
        'dspark.contextDefinitionLanguages must be comma-separated language ids, or *, got "Python!"; using "python,go"'
    ]
    assert validate({"contextDefinitionLanguages": "python, go"}) == ({"contextDefinitionLanguages": "python, go"}, [])
