[(line_comment) (block_comment) (string_literal)] @scope.text
(string_interpolation) @scope.code
[(escape_sequence) (character_literal)] @scope.none
[(program) (block) (class_body) (interface_body) (enum_body) (constructor_body) (switch_block)
 (switch_block_statement_group)] @scope.block
