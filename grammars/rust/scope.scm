[(line_comment) (block_comment) (string_literal) (raw_string_literal)] @scope.text
[(escape_sequence) (char_literal)] @scope.none
[(source_file) (block) (declaration_list) (field_declaration_list) (match_block)
 (enum_variant_list)] @scope.block
