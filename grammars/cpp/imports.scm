; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; `#include "x.h"` (not <system> headers): every name the header declares is visible (@wildcard).

(preproc_include path: (string_literal (string_content) @module)) @import @wildcard
