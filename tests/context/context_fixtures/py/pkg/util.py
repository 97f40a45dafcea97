"""Helpers."""

MAX_RETRIES = 3


def helper(config, *, retries=MAX_RETRIES):
    """Connect to config['host']:config['port'].

    Retries a few times.
    """
    for _ in range(retries):
        pass
    return config["host"]


class Client:
    """A client for the service.

    Long description.
    """

    timeout: float = 5.0

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str) -> bytes:
        """GET a path."""
        return b""

    @staticmethod
    def parse(raw: bytes) -> dict:
        return {}


def _private():
    return 0
