; After these tokens the next token starts a name or keyword.
[
  "." "def" "class" "import" "from" "as" "return" "yield" "await" "raise" "assert" "del"
  "global" "nonlocal" "if" "elif" "while" "for" "in" "not" "and" "or" "is" "lambda" "with" "except"
  "(" "[" "{" "," "=" ":=" "+" "-" "*" "/" "//" "%" "**" "==" "!=" "<" "<=" ">" ">="
  "+=" "-=" "*=" "/=" "->" "@"
] @key.after
