; Imports, for following a name used near the cursor to its definition (dspark_lsp/context/imports.py).
; @module the source as written; @name / @alias an imported name and its local name; @default the local
; name of the default export; @module.alias the local name bound to the whole module.

(import_statement
  (import_clause (named_imports (import_specifier name: (_) @name !alias)))
  source: (string (string_fragment) @module)) @import
(import_statement
  (import_clause (named_imports (import_specifier name: (_) @name alias: (identifier) @alias)))
  source: (string (string_fragment) @module)) @import
(import_statement (import_clause (identifier) @default) source: (string (string_fragment) @module)) @import
(import_statement
  (import_clause (namespace_import (identifier) @module.alias))
  source: (string (string_fragment) @module)) @import

; const m = require('./m'); const {a, b: c} = require('./m')
(variable_declarator
  name: (identifier) @module.alias
  value: (call_expression
    function: (identifier) @_require
    arguments: (arguments . (string (string_fragment) @module) .))
  (#eq? @_require "require")) @import
(variable_declarator
  name: (object_pattern (shorthand_property_identifier_pattern) @name)
  value: (call_expression
    function: (identifier) @_require
    arguments: (arguments . (string (string_fragment) @module) .))
  (#eq? @_require "require")) @import
(variable_declarator
  name: (object_pattern (pair_pattern key: (property_identifier) @name value: (identifier) @alias))
  value: (call_expression
    function: (identifier) @_require
    arguments: (arguments . (string (string_fragment) @module) .))
  (#eq? @_require "require")) @import

; import m = require('./m')
(import_statement (import_require_clause (identifier) @module.alias source: (string (string_fragment) @module))) @import

; Re-exports (a barrel file: `export * from './a'`, `export {b as c} from './b'`): followed to find a name
; the file only passes on. @name is the name there, @alias the name exported here.
(export_statement "*" source: (string (string_fragment) @module)) @import @reexport @wildcard
(export_statement
  (export_clause (export_specifier name: (_) @name !alias))
  source: (string (string_fragment) @module)) @import @reexport
(export_statement
  (export_clause (export_specifier name: (_) @name alias: (_) @alias))
  source: (string (string_fragment) @module)) @import @reexport
