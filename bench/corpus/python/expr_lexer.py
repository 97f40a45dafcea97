"""Tokenizer and recursive-descent evaluator for a tiny expression language.

Supported syntax::

    let rate = 0.07
    price * (1 + rate) - discount
    max(a, b) ** 2 % 7

Numbers, identifiers, the operators ``+ - * / % **``, parentheses, commas,
function calls and ``let`` bindings.  Errors carry the line and column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Callable, Dict, List, Optional


class TokenKind(Enum):
    NUMBER = auto()
    IDENT = auto()
    KEYWORD = auto()
    OP = auto()
    LPAREN = auto()
    RPAREN = auto()
    COMMA = auto()
    ASSIGN = auto()
    NEWLINE = auto()
    EOF = auto()


KEYWORDS = {"let"}
OPERATORS = ("**", "+", "-", "*", "/", "%")


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.kind.name}({self.text!r}) at {self.line}:{self.column}"


class SyntaxError_(Exception):
    """A lexing or parsing error with a source position."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.line = line
        self.column = column


class Lexer:
    def __init__(self, source: str) -> None:
        self.source = source
        self.pos = 0
        self.line = 1
        self.column = 1

    def _peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.source[index] if index < len(self.source) else ""

    def _advance(self, count: int = 1) -> str:
        text = self.source[self.pos:self.pos + count]
        for ch in text:
            if ch == "\n":
                self.line += 1
                self.column = 1
            else:
                self.column += 1
        self.pos += count
        return text

    def tokens(self) -> List[Token]:
        result: List[Token] = []
        while self.pos < len(self.source):
            ch = self._peek()
            line, column = self.line, self.column
            if ch in " \t\r":
                self._advance()
            elif ch == "#":
                while self._peek() not in ("", "\n"):
                    self._advance()
            elif ch == "\n":
                self._advance()
                result.append(Token(TokenKind.NEWLINE, "\n", line, column))
            elif ch.isdigit() or (ch == "." and self._peek(1).isdigit()):
                result.append(self._number(line, column))
            elif ch.isalpha() or ch == "_":
                start = self.pos
                while self._peek().isalnum() or self._peek() == "_":
                    self._advance()
                word = self.source[start:self.pos]
                kind = TokenKind.KEYWORD if word in KEYWORDS else TokenKind.IDENT
                result.append(Token(kind, word, line, column))
            else:
                result.append(self._punctuation(ch, line, column))
        result.append(Token(TokenKind.EOF, "", self.line, self.column))
        return result

    def _number(self, line: int, column: int) -> Token:
        start = self.pos
        seen_dot = False
        while self._peek().isdigit() or (self._peek() == "." and not seen_dot):
            if self._peek() == ".":
                seen_dot = True
            self._advance()
        return Token(TokenKind.NUMBER, self.source[start:self.pos], line, column)

    def _punctuation(self, ch: str, line: int, column: int) -> Token:
        for op in OPERATORS:
            if self.source.startswith(op, self.pos):
                return Token(TokenKind.OP, self._advance(len(op)), line, column)
        simple = {"(": TokenKind.LPAREN, ")": TokenKind.RPAREN,
                  ",": TokenKind.COMMA, "=": TokenKind.ASSIGN}
        if ch in simple:
            return Token(simple[ch], self._advance(), line, column)
        raise SyntaxError_(f"unexpected character {ch!r}", line, column)


BUILTINS: Dict[str, Callable[..., float]] = {
    "abs": abs, "min": min, "max": max, "sqrt": math.sqrt, "round": round,
}


class Evaluator:
    """Parses and evaluates token streams, keeping variables between lines."""

    def __init__(self, variables: Optional[Dict[str, float]] = None) -> None:
        self.variables: Dict[str, float] = dict(variables or {})
        self.tokens: List[Token] = []
        self.index = 0

    def run(self, source: str) -> Optional[float]:
        self.tokens = Lexer(source).tokens()
        self.index = 0
        last: Optional[float] = None
        while self._current().kind is not TokenKind.EOF:
            if self._current().kind is TokenKind.NEWLINE:
                self.index += 1
                continue
            last = self._statement()
        return last

    def _current(self) -> Token:
        return self.tokens[self.index]

    def _expect(self, kind: TokenKind) -> Token:
        token = self._current()
        if token.kind is not kind:
            raise SyntaxError_(f"expected {kind.name}, found {token.text!r}",
                               token.line, token.column)
        self.index += 1
        return token

    def _statement(self) -> float:
        if self._current().kind is TokenKind.KEYWORD:
            self._expect(TokenKind.KEYWORD)
            name = self._expect(TokenKind.IDENT).text
            self._expect(TokenKind.ASSIGN)
            value = self._expression()
            self.variables[name] = value
            return value
        return self._expression()

    def _expression(self) -> float:
        value = self._term()
        while self._current().text in ("+", "-"):
            op = self._expect(TokenKind.OP).text
            rhs = self._term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def _term(self) -> float:
        value = self._power()
        while self._current().text in ("*", "/", "%"):
            token = self._expect(TokenKind.OP)
            rhs = self._power()
            if token.text != "*" and rhs == 0:
                raise SyntaxError_("division by zero", token.line, token.column)
            if token.text == "*":
                value *= rhs
            elif token.text == "/":
                value /= rhs
            else:
                value %= rhs
        return value

    def _power(self) -> float:
        base = self._unary()
        if self._current().text == "**":
            self._expect(TokenKind.OP)
            return base ** self._power()  # right associative
        return base

    def _unary(self) -> float:
        if self._current().text == "-":
            self._expect(TokenKind.OP)
            return -self._unary()
        return self._primary()

    def _primary(self) -> float:
        token = self._current()
        if token.kind is TokenKind.NUMBER:
            self.index += 1
            return float(token.text)
        if token.kind is TokenKind.LPAREN:
            self.index += 1
            value = self._expression()
            self._expect(TokenKind.RPAREN)
            return value
        if token.kind is TokenKind.IDENT:
            self.index += 1
            if self._current().kind is TokenKind.LPAREN:
                return self._call(token)
            if token.text not in self.variables:
                raise SyntaxError_(f"undefined name {token.text!r}", token.line, token.column)
            return self.variables[token.text]
        raise SyntaxError_(f"unexpected token {token.text!r}", token.line, token.column)

    def _call(self, name: Token) -> float:
        func = BUILTINS.get(name.text)
        if func is None:
            raise SyntaxError_(f"unknown function {name.text!r}", name.line, name.column)
        self._expect(TokenKind.LPAREN)
        args: List[float] = []
        if self._current().kind is not TokenKind.RPAREN:
            args.append(self._expression())
            while self._current().kind is TokenKind.COMMA:
                self.index += 1
                args.append(self._expression())
        self._expect(TokenKind.RPAREN)
        return float(func(*args))


if __name__ == "__main__":
    program = "let price = 40\nlet rate = 0.25  # tax\nprice * (1 + rate) - max(2, 3) ** 2\n"
    print(Evaluator().run(program))
