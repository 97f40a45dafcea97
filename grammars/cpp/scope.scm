[(comment) (string_literal) (raw_string_literal) (system_lib_string)] @scope.text
[(escape_sequence) (char_literal)] @scope.none
[(translation_unit) (compound_statement) (field_declaration_list) (declaration_list)
 (enumerator_list)] @scope.block
