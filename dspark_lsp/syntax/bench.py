"""Cost of one decode step's syntax work (is_key_next + stop_index) on a large file."""

from __future__ import annotations

import statistics
import time

from dspark_lsp.errors import UserError
from dspark_lsp.syntax.document import SyntaxDocument
from dspark_lsp.syntax.languages import available_languages

# One function per language; repeated to build a file of the requested size.  ``{i}`` numbers copies.
_UNITS: dict[str, str] = {
    "python": "def func_{i}(items, limit=10):\n    total = 0\n    for item in items:\n"
    "        if item > limit:\n            total += item  # big one\n    return total\n\n",
    "javascript": "function func_{i}(items, limit) {{\n  let total = 0;\n  for (const item of items) {{\n"
    "    if (item > limit) {{ total += item; }}\n  }}\n  return total;\n}}\n\n",
    "go": "func func_{i}(items []int, limit int) int {{\n\ttotal := 0\n\tfor _, item := range items {{\n"
    "\t\tif item > limit {{\n\t\t\ttotal += item\n\t\t}}\n\t}}\n\treturn total\n}}\n\n",
    "rust": "fn func_{i}(items: &[i32], limit: i32) -> i32 {{\n    let mut total = 0;\n"
    "    for item in items {{\n        if *item > limit {{ total += item; }}\n    }}\n    total\n}}\n\n",
    "java": "  static int func_{i}(int[] items, int limit) {{\n    int total = 0;\n"
    "    for (int item : items) {{\n      if (item > limit) {{ total += item; }}\n    }}\n    return total;\n  }}\n\n",
    "c": "int func_{i}(const int *items, int n, int limit) {{\n  int total = 0;\n"
    "  for (int k = 0; k < n; k++) {{\n    if (items[k] > limit) {{ total += items[k]; }}\n  }}\n  return total;\n}}\n\n",
}
_UNITS["typescript"] = _UNITS["tsx"] = _UNITS["javascript"]
_UNITS["cpp"] = _UNITS["c"]

# What the "model" writes at the cursor: a small body, appended a few characters per call.
_COMPLETIONS: dict[str, str] = {
    "python": "    result = [value * 2 for value in items if value]\n    return sum(result)\n",
    "go": "\tresult := 0\n\tfor _, v := range items {\n\t\tresult += v * 2\n\t}\n\treturn result\n}\n",
    "rust": "    let result: i32 = items.iter().map(|v| v * 2).sum();\n    result\n}\n",
}
_DEFAULT_COMPLETION = "  const result = items.map((v) => v * 2);\n  return result.length;\n}\n"
_OPENERS = {
    "python": "def target(items):\n",
    "go": "func target(items []int) int {\n",
    "rust": "fn target(items: &[i32]) -> i32 {\n",
    "java": "  static int target(int[] items) {\n",
    "c": "int target(const int *items) {\n",
    "cpp": "int target(const int *items) {\n",
}
_DEFAULT_OPENER = "function target(items) {\n"


def synthetic_file(language: str, lines: int) -> tuple[str, int]:
    """A file of about ``lines`` lines with a cursor (returned offset) on the empty body in its middle."""
    unit = _UNITS.get(language, _UNITS["python"])
    per_unit = unit.count("\n")
    copies = max(2, lines // per_unit)
    half = copies // 2
    head = "".join(unit.format(i=i) for i in range(half))
    tail = "".join(unit.format(i=i) for i in range(half, copies))
    if language == "java":
        head, tail = "class Big {\n" + head, tail + "}\n"
    opener = _OPENERS.get(language, _DEFAULT_OPENER)
    closer = "" if language == "python" else ("  }\n" if language == "java" else "}\n")
    text = head + opener + "\n" + closer + "\n" + tail
    return text, len(head) + len(opener)


def measure_step_cost(
    language: str, lines: int = 2000, chunk: int = 3, repeats: int = 3
) -> dict[str, float | str]:
    """Mean / p95 milliseconds of one ``is_key_next`` + ``stop_index`` call on a ``lines``-line file."""
    if language not in available_languages():
        raise UserError(f"no grammar for {language!r}; available: {', '.join(available_languages())}")
    text, offset = synthetic_file(language, lines)
    completion = _COMPLETIONS.get(language, _DEFAULT_COMPLETION)
    doc = SyntaxDocument(text, language)
    scope = doc.completion_scope(offset)
    samples: list[float] = []
    for _ in range(repeats):
        tracker = doc.generation(offset, scope)
        for end in range(chunk, len(completion) + chunk, chunk):
            generated = completion[:end]
            t0 = time.perf_counter()
            tracker.is_key_next(generated)
            tracker.stop_index(generated)
            samples.append((time.perf_counter() - t0) * 1000.0)
    samples.sort()
    return {
        "language": language,
        "lines": float(text.count("\n")),
        "steps": float(len(samples)),
        "mean_ms": statistics.fmean(samples),
        "p95_ms": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
        "max_ms": samples[-1],
    }


def main() -> None:  # pragma: no cover - manual use: python -m dspark_lsp.syntax.bench
    for language in available_languages():
        r = measure_step_cost(language)
        print(
            f"{language:11s} {int(r['lines']):5d} lines  mean {r['mean_ms']:.3f} ms  p95 {r['p95_ms']:.3f} ms"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
