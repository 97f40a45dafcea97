; After these tokens the next token starts a name or keyword.
[
  "." "::" "fn" "let" "struct" "enum" "trait" "impl" "use" "mod" "return" "match" "if" "while"
  "for" "in" "as" "pub" "const" "static" "type" "where" "dyn" "move"
  "(" "[" "," "=" "=>" "->" ":" "+" "-" "*" "/" "%" "==" "!=" "<" "<=" ">" ">=" "&&" "||" "!" "&"
  "+=" "-="
] @key.after
