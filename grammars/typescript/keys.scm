; After these tokens the next token starts a name or keyword.
[
  "." "?." "function" "class" "new" "return" "const" "let" "var" "import" "from" "export" "extends"
  "implements" "interface" "type" "enum" "namespace" "keyof" "as"
  "typeof" "instanceof" "await" "yield" "throw" "in" "of" "case" "async"
  "(" "[" "," "=" "=>" ":" "?" "+" "-" "*" "/" "%" "==" "===" "!=" "!==" "<" "<=" ">" ">="
  "&&" "||" "??" "!" "+=" "-=" "*=" "/=" "..." "|" "&"
] @key.after
