"""Settings that belong to the LSP layer itself (the rest map onto ServiceConfig in the service).

Clients send settings in two places: `initializationOptions` (flat, or under "dspark") and
`workspace/didChangeConfiguration` (`{"dspark": {...}}`, or null, meaning "pull them with
workspace/configuration"). The effective settings are the init options overlaid with the latest section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark_lsp.settings_schema import BY_NAME

SECTION = "dspark"
_ENABLE = BY_NAME["enable"]
_DEBOUNCE = BY_NAME["debounceMs"]
MAX_DEBOUNCE_MS = int(_DEBOUNCE.maximum or 0)


@dataclass(frozen=True)
class LspSettings:
    # Defaults and checks from the one settings table (dspark_lsp/settings_schema.py), which the editors share.
    enable: bool = bool(_ENABLE.default)
    debounce_ms: int = int(_DEBOUNCE.default or 0)

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> tuple[LspSettings, list[str]]:
        """Read `enable` and `debounceMs`; invalid values fall back to defaults with a problem line."""
        problems: list[str] = []
        enable = cls.enable
        debounce = cls.debounce_ms
        value = settings.get("enable")
        if value is not None:
            if (problem := _ENABLE.problem(value)) is None:
                enable = bool(value)
            else:
                problems.append(problem)
        value = settings.get("debounceMs")
        if value is not None:
            if (problem := _DEBOUNCE.problem(value)) is None:
                debounce = int(value)
            else:
                problems.append(problem)
        return cls(enable=enable, debounce_ms=debounce), problems


def section_of(payload: Any, *, flat_ok: bool) -> dict[str, Any] | None:
    """The `dspark` section of a settings payload.

    `flat_ok` accepts a payload that is itself the section (initializationOptions written by hand in
    Neovim/Helix configs usually are). Returns None when there is no usable section.
    """
    if not isinstance(payload, dict):
        return None
    inner = payload.get(SECTION)
    if isinstance(inner, dict):
        return dict(inner)
    if flat_ok and SECTION not in payload:
        return dict(payload)
    return None


def merge(init_options: dict[str, Any], latest: dict[str, Any] | None) -> dict[str, Any]:
    """Init options overlaid with the latest configuration section (keys set to null are dropped so
    they fall back to defaults)."""
    merged = dict(init_options)
    if latest:
        merged.update(latest)
    return {k: v for k, v in merged.items() if v is not None}
