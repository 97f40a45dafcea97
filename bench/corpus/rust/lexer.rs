//! A lexer for a small configuration/scripting language.
//!
//! Produces tokens with byte spans so that later stages can report errors
//! pointing at the exact source location.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    Ident(String),
    Int(i64),
    Float(f64),
    Str(String),
    Keyword(Keyword),
    Symbol(char),
    Arrow,
    EqEq,
    NotEq,
    LessEq,
    GreaterEq,
    Eof,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    Let,
    Fn,
    If,
    Else,
    Return,
    True,
    False,
}

impl Keyword {
    fn from_word(word: &str) -> Option<Keyword> {
        match word {
            "let" => Some(Keyword::Let),
            "fn" => Some(Keyword::Fn),
            "if" => Some(Keyword::If),
            "else" => Some(Keyword::Else),
            "return" => Some(Keyword::Return),
            "true" => Some(Keyword::True),
            "false" => Some(Keyword::False),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub line: u32,
    pub column: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexError {
    pub message: String,
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for LexError {}

pub struct Lexer<'a> {
    src: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    line: u32,
    column: u32,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer { src, chars: src.char_indices().peekable(), line: 1, column: 1 }
    }

    fn bump(&mut self) -> Option<(usize, char)> {
        let next = self.chars.next();
        if let Some((_, ch)) = next {
            if ch == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
        }
        next
    }

    fn peek_char(&mut self) -> Option<char> {
        self.chars.peek().map(|&(_, ch)| ch)
    }

    fn offset(&mut self) -> usize {
        self.chars.peek().map(|&(i, _)| i).unwrap_or(self.src.len())
    }

    fn error(&self, message: impl Into<String>) -> LexError {
        LexError { message: message.into(), line: self.line, column: self.column }
    }

    fn skip_trivia(&mut self) {
        while let Some(ch) = self.peek_char() {
            if ch.is_whitespace() {
                self.bump();
            } else if ch == '/' && self.src[self.offset()..].starts_with("//") {
                while let Some(c) = self.peek_char() {
                    if c == '\n' {
                        break;
                    }
                    self.bump();
                }
            } else {
                break;
            }
        }
    }

    /// Returns the next token, or `Eof` at the end of input.
    pub fn next_token(&mut self) -> Result<Token, LexError> {
        self.skip_trivia();
        let (line, column) = (self.line, self.column);
        let start = self.offset();
        let ch = match self.bump() {
            Some((_, ch)) => ch,
            None => return Ok(Token { kind: TokenKind::Eof, span: Span { start, end: start, line, column } }),
        };
        let kind = match ch {
            c if c.is_ascii_digit() => self.number(start)?,
            c if c.is_alphabetic() || c == '_' => {
                while matches!(self.peek_char(), Some(c) if c.is_alphanumeric() || c == '_') {
                    self.bump();
                }
                let word = &self.src[start..self.offset()];
                match Keyword::from_word(word) {
                    Some(kw) => TokenKind::Keyword(kw),
                    None => TokenKind::Ident(word.to_string()),
                }
            }
            '"' => self.string()?,
            '-' if self.peek_char() == Some('>') => {
                self.bump();
                TokenKind::Arrow
            }
            '=' | '!' | '<' | '>' if self.peek_char() == Some('=') => {
                self.bump();
                match ch {
                    '=' => TokenKind::EqEq,
                    '!' => TokenKind::NotEq,
                    '<' => TokenKind::LessEq,
                    _ => TokenKind::GreaterEq,
                }
            }
            '(' | ')' | '{' | '}' | '[' | ']' | ',' | ';' | ':' | '+' | '-' | '*' | '/' | '='
            | '<' | '>' | '!' | '.' => TokenKind::Symbol(ch),
            other => return Err(self.error(format!("unexpected character {:?}", other))),
        };
        Ok(Token { kind, span: Span { start, end: self.offset(), line, column } })
    }

    fn number(&mut self, start: usize) -> Result<TokenKind, LexError> {
        let mut is_float = false;
        while let Some(c) = self.peek_char() {
            if c.is_ascii_digit() || c == '_' {
                self.bump();
            } else if c == '.' && !is_float {
                is_float = true;
                self.bump();
            } else {
                break;
            }
        }
        let text: String = self.src[start..self.offset()].chars().filter(|&c| c != '_').collect();
        if is_float {
            text.parse::<f64>().map(TokenKind::Float).map_err(|e| self.error(format!("bad float {}: {}", text, e)))
        } else {
            text.parse::<i64>().map(TokenKind::Int).map_err(|e| self.error(format!("bad integer {}: {}", text, e)))
        }
    }

    fn string(&mut self) -> Result<TokenKind, LexError> {
        let mut value = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error("unterminated string literal")),
                Some((_, '"')) => return Ok(TokenKind::Str(value)),
                Some((_, '\\')) => match self.bump() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, 't')) => value.push('\t'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, other)) => return Err(self.error(format!("unknown escape \\{}", other))),
                    None => return Err(self.error("unterminated escape")),
                },
                Some((_, ch)) => value.push(ch),
            }
        }
    }
}

/// Lex an entire source string.
pub fn tokenize(src: &str) -> Result<Vec<Token>, LexError> {
    let mut lexer = Lexer::new(src);
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token()?;
        let done = token.kind == TokenKind::Eof;
        tokens.push(token);
        if done {
            return Ok(tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_function_header() {
        let source = "fn add(a, b) -> 1_000 // sum\n";
        let kinds: Vec<TokenKind> = tokenize(source).unwrap().into_iter().map(|t| t.kind).collect();
        assert_eq!(kinds[0], TokenKind::Keyword(Keyword::Fn));
        assert_eq!(kinds[1], TokenKind::Ident("add".into()));
        assert_eq!(kinds[7], TokenKind::Arrow);
        assert_eq!(kinds[8], TokenKind::Int(1000));
        assert_eq!(kinds.last(), Some(&TokenKind::Eof));
    }

    #[test]
    fn reports_unterminated_string() {
        let err = tokenize("let s = \"oops").unwrap_err();
        assert!(err.message.contains("unterminated"));
    }
}
