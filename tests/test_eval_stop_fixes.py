"""The stop-rule fixes the eval found, as labelled cases (document with cursor, model output, kept text).

Each case is the shape of a HumanEval hole where the old rules cut wrongly and the oracle cut passed.
"""

from __future__ import annotations

import pytest

from dspark_lsp.syntax import SyntaxDocument

CURSOR = "<|>"

CASES: list[tuple[str, str, str, str | None]] = [
    # A body's first line may repeat a line two back (HumanEval/141 L7: it used to come out empty).
    (
        "python",
        "def f(a, b):\n    if a:\n        return 'No'\n    if b:\n<|>\n    return 'Yes'\n",
        "        return 'No'\n    return 'Yes'\n",
        "        return 'No'",
    ),
    # ... but repeating the line right before the cursor is still a loop.
    ("python", "for a in b:\n    print(a)\n    <|>\n", "print(a)\n    print(a)\n", ""),
    # The model skips the suffix's first line and re-types its second (HumanEval/140 L1, 99 L7).
    (
        "python",
        'def f(text):\n    new = ""\n<|>\n    start, end = 0, 0\n    while i < len(text):\n        i += 1\n',
        "    i = 0\n    while i < len(text):\n        if text[i]:\n",
        "    i = 0",
    ),
    # The suffix starts deeper than the completion: the hole is the header of the suffix's block
    # (HumanEval/126 L1).
    (
        "python",
        "def f(lst):\n    d = {}\n<|>\n        d[i] += 1\n    return d\n",
        "    for i in lst:\n        if i == lst[0]:\n            d[i] = 1\n",
        "    for i in lst:",
    ),
    (
        "javascript",
        "function f(xs) {\n  let n = 0;\n  <|>\n    n += x;\n  }\n}\n",
        "for (const x of xs) {\n    n++;\n",
        "for (const x of xs) {",
    ),
    # Nothing after the hole: it may close an inner block and go on in the outer one (HumanEval/142).
    (
        "python",
        "def f(lst):\n    r = []\n    for i in lst:\n        if i % 3 == 0:\n<|>\n",
        "            r.append(i)\n        else:\n            r.append(0)\n    return r\n\n# Check\n",
        "            r.append(i)\n        else:\n            r.append(0)\n    return r",
    ),
    # Code after the hole: a dedent still ends it (HumanEval/141: no ``return 'Yes'`` before the checks).
    (
        "python",
        "def f(s):\n    if s:\n        return 'No'\n    if not s[0]:\n<|>\n    if s[1]:\n        return 'No'\n",
        "        return 'No'\n    return 'Yes'\n",
        "        return 'No'",
    ),
    # Not when the suffix is at the completion's own depth: a new block is being written.
    (
        "python",
        "def f(lst):\n    d = {}\n<|>\n    return d\n",
        "    for i in lst:\n        d[i] = 1\n    return d\n",
        "    for i in lst:\n        d[i] = 1",
    ),
]


@pytest.mark.parametrize(("language", "doc_text", "generated", "want"), CASES)
@pytest.mark.parametrize("step", [1, 5, 1000])
def test_eval_found_stop(language: str, doc_text: str, generated: str, want: str | None, step: int) -> None:
    offset = doc_text.index(CURSOR)
    doc = SyntaxDocument(doc_text.replace(CURSOR, "", 1), language)
    tracker = doc.generation(offset, doc.completion_scope(offset))
    cut = None
    for end in range(step, len(generated) + step, step):
        cut = tracker.stop_index(generated[:end])
        if cut is not None:
            break
    if cut is None:
        cut = tracker.stop_index(generated, final=True)
    assert (None if cut is None else generated[:cut]) == want


@pytest.mark.parametrize(
    ("doc_text", "generated", "want"),
    [
        # HumanEval span /151: the model re-types "])" and goes on; a decoder round that ends after "])"
        # or one that runs past it must give the same completion.
        (
            "return sum([i**2 for i in lst if <|>])\n",
            "i % 2 != 0 and isinstance(i, int)]) if lst else 0\n",
            "i % 2 != 0 and isinstance(i, int)",
        ),
        ("x = foo(<|>)\n", "a) + b(c)\n", "a"),
        ("x = foo(<|>)\n", "g(a)) + 1\n", "g(a)"),
    ],
)
def test_single_line_cut_does_not_depend_on_rounds(doc_text: str, generated: str, want: str) -> None:
    offset = doc_text.index(CURSOR)
    doc = SyntaxDocument(doc_text.replace(CURSOR, "", 1), "python")
    cuts = set()
    for step in (1, 3, 7, len(generated)):
        tracker = doc.generation(offset, doc.completion_scope(offset))
        cut = None
        for end in range(step, len(generated) + step, step):
            cut = tracker.stop_index(generated[:end])
            if cut is not None:
                break
        cuts.add(generated[: cut if cut is not None else tracker.stop_index(generated, final=True)])
    assert cuts == {want}
