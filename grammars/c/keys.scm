; After these tokens the next token starts a name or keyword.
[
  "." "->" "return" "struct" "enum" "union" "typedef" "case" "sizeof" "static" "const" "extern"
  "#include" "#define" "#ifdef" "#ifndef" "#if"
  "(" "[" "," "=" "?" ":" "+" "-" "*" "/" "%" "==" "!=" "<" "<=" ">" ">=" "&&" "||" "!" "&"
  "+=" "-="
] @key.after
