"""Run `dspark-lsp ARGS...` with the hybrid draft's min_lookup_confidence set to argv[1].

The experiment behind this directory's "min_lookup_confidence 0.75 / 0.95" rows:
`python lookup_min.py 0.75 bench --limit 1 ...`.
"""

import sys
from typing import Any

import dspark_lsp.drafts.hybrid as hybrid
from dspark_lsp.cli import main

_value = float(sys.argv[1])
_original_init = hybrid.HybridDraftSource.__init__


def _init(self: Any, model_source: Any, ngram: Any = None, min_lookup_confidence: float = 0.55,
          second_opinion: bool = False) -> None:
    # The bench builds the hybrid source with its default; the experiment overrides that one value.
    _original_init(self, model_source, ngram, _value, second_opinion)


hybrid.HybridDraftSource.__init__ = _init  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]))
