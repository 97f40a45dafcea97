[(comment) (string) (template_string) (regex)] @scope.text
(template_substitution) @scope.code
(escape_sequence) @scope.none
[(program) (statement_block) (class_body) (switch_body)] @scope.block
