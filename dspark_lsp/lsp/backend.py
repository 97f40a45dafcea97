"""What the language server needs from `dspark_lsp.service`, as one injectable bundle.

The server never imports torch or the models itself: it talks to a `CompletionService` through the
protocol below, in the types of `dspark_lsp.contract` (torch-free). The config it passes around is a
`ServiceConfig`, named for the type checker only (service.py imports torch). Tests inject a fake backend
(`create_server(service_factory=...)`) so the protocol layer can be exercised without model weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dspark_lsp.contract import CompletionRequest, CompletionResult, ServiceRecordWire

if TYPE_CHECKING:
    from dspark_lsp.service import ServiceConfig

# progress(message, fraction in [0, 1] or None) — forwarded to window/workDoneProgress.
ProgressFn = Callable[[str, "float | None"], None]


class ServiceLike(Protocol):
    """The subset of `dspark_lsp.service.CompletionService` the server calls."""

    # One line to show the user once the load is done (serving another model than the settings named,
    # models/default_choice.py), or None.
    notice: str | None

    def complete(
        self,
        req: CompletionRequest,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> CompletionResult: ...

    def update_config(self, config: ServiceConfig) -> None: ...

    def take_notice(self) -> str | None:
        """A one-line note that came due while serving (the default model answering slowly on this machine,
        latency_note.py), given once; else None."""
        ...

    def recent_stats(self) -> list[ServiceRecordWire]:
        """The last requests' records, each `contract.ServiceRecord.to_json()` (dspark/stats sends them)."""
        ...

    def close(self) -> None: ...


# (settings, base config or None) -> (config, problems)
ConfigFromSettings = Callable[[dict[str, Any], "ServiceConfig | None"], "tuple[ServiceConfig, list[str]]"]
ServiceFactory = Callable[["ServiceConfig", ProgressFn], ServiceLike]


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
