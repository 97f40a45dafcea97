[(comment) (string)] @scope.text
(interpolation) @scope.code
(escape_sequence) @scope.none
[(module) (block)] @scope.block
