"""A tiny example file for `dspark-lsp complete` (see the README)."""


def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def factorial(n: int) -> int:
    """Return n! computed iteratively."""
    result = 1
    for i in range(2, n + 1):
        
    return result
