[(comment) (interpreted_string_literal) (raw_string_literal)] @scope.text
[(escape_sequence) (rune_literal)] @scope.none
[(source_file) (block) (statement_list) (field_declaration_list) (expression_switch_statement)
 (type_switch_statement) (select_statement)] @scope.block
