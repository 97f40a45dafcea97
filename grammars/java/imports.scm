; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; @path the dotted path as written (`a.b.C`: class C of package a.b; static: member of class a.b.D);
; @wildcard `.*`.

(import_declaration (scoped_identifier) @path (asterisk)? @wildcard) @import
