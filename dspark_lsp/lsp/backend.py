"""What the language server needs from `dspark_lsp.service`, as one injectable bundle.

The server never imports torch or the models itself: it talks to a `CompletionService` through the
protocol below, in the types of `dspark_lsp.contract` (torch-free). Tests inject a fake backend
(`create_server(service_factory=...)`) so the protocol layer can be exercised without model weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dspark_lsp.contract import CompletionRequest, CompletionResult

# progress(message, fraction in [0, 1] or None) — forwarded to window/workDoneProgress.
ProgressFn = Callable[[str, "float | None"], None]


class ServiceLike(Protocol):
    """The subset of `dspark_lsp.service.CompletionService` the server calls."""

    def complete(
        self,
        req: CompletionRequest,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> CompletionResult: ...

    def update_config(self, config: Any) -> None: ...

    def recent_stats(self) -> list[dict[str, Any]]:
        """The last requests' records, each a `contract.ServiceRecord`'s wire form."""
        ...

    def close(self) -> None: ...


ConfigFromSettings = Callable[[dict[str, Any], Any], "tuple[Any, list[str]]"]
ServiceFactory = Callable[[Any, ProgressFn], ServiceLike]


@dataclass(frozen=True)
class Backend:
    """config_from_settings(settings, base) -> (config, problems); make_request(**fields) -> request;
    load(config, progress) -> service (blocking, may raise UserError)."""

    config_from_settings: ConfigFromSettings
    make_request: Callable[..., CompletionRequest]
    load: ServiceFactory


def default_backend(service_factory: ServiceFactory | None = None) -> Backend:
    """The real service; imported lazily so `dspark-lsp --help` does not pay for torch."""
    import dspark_lsp.service as service

    return Backend(
        config_from_settings=lambda settings, base: service.ServiceConfig.from_settings(settings, base),
        make_request=CompletionRequest,
        load=service_factory or (lambda config, progress: service.CompletionService.load(config, progress)),
    )
