; After these tokens the next token starts a name or keyword.
[
  "." "class" "interface" "enum" "record" "extends" "implements" "new" "return" "import" "package"
  "throw" "throws" "instanceof" "case" "public" "private" "protected" "static" "final" "abstract"
  "(" "[" "," "=" "->" "?" ":" "+" "-" "*" "/" "%" "==" "!=" "<" "<=" ">" ">=" "&&" "||" "!"
  "+=" "-=" "@"
] @key.after
