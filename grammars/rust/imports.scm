; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; @use a use tree (flattened in Python: `crate::a::{b::C, d as e}` gives one import per leaf);
; @mod a module declared in another file (`mod x;`, no body).

(use_declaration argument: (_) @use) @import
(mod_item name: (identifier) @mod !body) @import
