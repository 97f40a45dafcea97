; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; @module the package path; @module.alias an explicit package name (else the path's last part);
; @wildcard a dot import (the package's names used unqualified). Blank imports bind nothing.

(import_spec !name path: (interpreted_string_literal (interpreted_string_literal_content) @module)) @import
(import_spec
  name: (package_identifier) @module.alias
  path: (interpreted_string_literal (interpreted_string_literal_content) @module)) @import
(import_spec
  name: (dot) @wildcard
  path: (interpreted_string_literal (interpreted_string_literal_content) @module)) @import
