; After these tokens the next token starts a name or keyword.
[
  "." "func" "package" "import" "return" "var" "const" "type" "struct" "interface" "go" "defer"
  "range" "case" "chan" "map"
  "(" "[" "," "=" ":=" ":" "+" "-" "*" "/" "%" "==" "!=" "<" "<=" ">" ">=" "&&" "||" "!" "&" "<-"
  "+=" "-="
] @key.after
