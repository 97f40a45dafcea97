; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; One match per imported thing, grouped by @import and @module: @module as written (leading dots = the
; relative level), @module.alias the local name bound to the module, @name / @alias an imported name
; and its local name, @wildcard everything the module defines.

(import_statement name: (dotted_name) @module) @import
(import_statement
  name: (aliased_import name: (dotted_name) @module alias: (identifier) @module.alias)) @import

(import_from_statement module_name: (_) @module name: (dotted_name) @name) @import
(import_from_statement
  module_name: (_) @module
  name: (aliased_import name: (dotted_name) @name alias: (identifier) @alias)) @import
(import_from_statement module_name: (_) @module (wildcard_import) @wildcard) @import
