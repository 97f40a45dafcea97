; After these tokens the next token starts a name or keyword.
[
  "." "->" "::" "return" "struct" "enum" "union" "typedef" "class" "namespace" "new" "delete"
  "template" "typename" "using" "case" "sizeof" "static" "const" "extern" "virtual"
  "#include" "#define" "#ifdef" "#ifndef" "#if"
  "(" "[" "," "=" "?" ":" "+" "-" "*" "/" "%" "==" "!=" "<" "<=" ">" ">=" "&&" "||" "!" "&"
  "+=" "-="
] @key.after
