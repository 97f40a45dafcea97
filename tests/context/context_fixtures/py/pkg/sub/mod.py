def deep(a, b):
    """Deep."""
    return a + b


RATE = 0.5
