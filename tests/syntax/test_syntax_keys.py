"""Labelled key positions: for prefix (cursor at its end) + generated text, is the next token key?"""

from __future__ import annotations

import pytest

from dspark_lsp.syntax import Scope, SyntaxDocument

# (language, document prefix, generated so far, expected is_key_next)
CASES: list[tuple[str | None, str, str, bool]] = [
    ("python", "import os\n\ndef f(path):\n", "    return os", False),  # a complete known name: "." next
    ("python", "import os\n\ndef f(path):\n", "    return os.", True),  # member access
    ("python", "import os\n\ndef f(path):\n", "    return os.path.join(pa", True),  # "pa" may become "path"
    (
        "python",
        "import os\n\ndef f(path):\n",
        "    return os.path.join(path",
        False,
    ),  # complete name: ")" or ","
    ("python", "import os\n\ndef f(path):\n", "    return os.path.join(path)", False),  # after a closer
    ("python", "import os\n\ndef f(path):\n", "    return", True),  # a value follows "return"
    ("python", "import os\n\ndef f(path):\n", "    x = 1  # the ", False),  # comment prose
    ("python", "import os\n\ndef f(path):\n", '    s = "abc ', False),  # string contents
    ("python", "import os\n\ndef f(path):\n", "    x = 12", False),  # a number
    ("python", "import os\n\ndef f(path):\n", "    x = (", True),  # an expression starts
    ("python", "def f(a):\n    x = 1\n", "    ", True),  # statement start at the body's indentation
    ("python", "def f(a):\n    x = 1\n", "  ", False),  # indentation not finished yet
    ("python", "x = 1\n", "brand_new_na", True),  # an unknown word being spelled
    ("javascript", "const items = [];\n", "items.", True),
    ("javascript", "const items = [];\n", "items.push(1);", False),
    ("javascript", "const items = [];\n", "const total = ", True),
    ("javascript", "const items = [];\n", "// note: ", False),
    ("typescript", "let n = 0;\n", "function f(a: ", True),
    ("typescript", "let n = 0;\n", "n += 1;", False),
    ("go", "package main\n\nfunc main() {\n", "\tfmt.", True),
    ("go", "package main\n\nfunc main() {\n", "\tx := ", True),
    ("go", "package main\n\nfunc main() {\n", '\tfmt.Println("hi ', False),
    ("go", "package main\n\nfunc main() {\n", "\tx := 1}", False),
    ("rust", "fn main() {\n", "    let v = Vec::", True),
    ("rust", "fn main() {\n", "    let v = 3;", False),
    ("rust", "fn main() {\n", "    let ", True),
    ("java", "class A {\n", "  public ", True),
    ("java", "class A {\n", "  int x = 1;", False),
    ("c", "int main(void) {\n", "  return ", True),
    ("c", "int main(void) {\n", "  p->", True),
    ("c", "int main(void) {\n", "  x++;", False),
    ("cpp", "int main() {\n", "  std::", True),
    ("cpp", "int main() {\n", "  f();", False),
    (None, "some words\n", "word.", True),
    (None, "some words\n", "x)", False),
]


@pytest.mark.parametrize(("language", "prefix", "generated", "want"), CASES)
def test_key_case(language: str | None, prefix: str, generated: str, want: bool) -> None:
    doc = SyntaxDocument(prefix, language)
    tracker = doc.generation(len(prefix), Scope.MULTI_LINE)
    assert tracker.is_key_next(generated) is want


def test_streaming_matches_one_shot() -> None:
    """Answers after growing the text one character at a time equal a fresh tracker's one-shot answer."""
    prefix = "import os\n\ndef f(path):\n"
    text = '    if path:\n        return os.path.join(path, "x")  # done\n    return None\n'
    doc = SyntaxDocument(prefix, "python")
    streaming = doc.generation(len(prefix), Scope.MULTI_LINE)
    for end in range(1, len(text) + 1):
        fresh = doc.generation(len(prefix), Scope.MULTI_LINE)
        assert streaming.is_key_next(text[:end]) == fresh.is_key_next(text[:end]), repr(text[:end])
