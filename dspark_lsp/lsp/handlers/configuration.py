"""workspace/didChangeConfiguration, and applying settings (also used at `initialized`)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from dspark_lsp.lsp.settings import SECTION, LspSettings, merge, section_of
from dspark_lsp.settings_schema import validate

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

# How long a settings change waits for the client's answer to our workspace/configuration pull: a client
# that never answers left the handler waiting forever (and the change silently unapplied).
PULL_TIMEOUT_S = 10.0
PULL_TIMEOUT_ENV = "DSPARK_CONFIG_PULL_TIMEOUT_S"  # tests shorten it


def pull_timeout_s() -> float:
    try:
        value = float(os.environ.get(PULL_TIMEOUT_ENV, PULL_TIMEOUT_S))
    except ValueError:
        return PULL_TIMEOUT_S
    return value if value > 0 else PULL_TIMEOUT_S


def apply_settings(session: Session, *, reason: str) -> None:
    """Recompute the effective settings, report invalid values, and load / reload / update the service."""
    try:
        backend = session.ensure_backend()
    except Exception as exc:  # the service module itself is broken or missing
        log.exception("the completion service is unavailable")
        session.channel.show_message(
            f"DSpark: the completion service is unavailable: {exc}", types.MessageType.Error
        )
        session.channel.status("error", f"service unavailable: {exc}")
        return
    # The schema's checks first (names, types, ranges: the editors were generated from the same table),
    # so the service only ever sees valid values; its own checks remain for cross-field rules.
    settings, problems = validate(merge(session.init_options, session.latest_section))
    lsp_settings, lsp_problems = LspSettings.from_settings(settings)
    problems.extend(lsp_problems)
    try:
        config, config_problems = backend.config_from_settings(settings, None)
    except Exception as exc:  # from_settings should report, not raise; survive it if it does
        log.exception("reading the settings failed")
        config, config_problems = backend.config_from_settings({}, None)
        config_problems = [f"could not read the settings ({exc}); using defaults"]
    problems.extend(config_problems)
    if problems:
        text = "; ".join(problems)
        log.warning("invalid settings (%s): %s", reason, text)
        session.channel.show_message(f"DSpark settings: {text}", types.MessageType.Warning)
    session.lsp_settings = lsp_settings
    session.config = config
    assert session.models is not None
    session.models.apply(config, lsp_settings.enable)


async def did_change_configuration(session: Session, params: types.DidChangeConfigurationParams) -> None:
    section = section_of(params.settings, flat_ok=False)
    if section is None and _can_pull(session):
        # Clients that send `settings: null` expect us to pull the section.
        section = await _pull_section(session)
    if section is None:
        log.info("didChangeConfiguration without a %r section; settings unchanged", SECTION)
        return
    session.latest_section = section
    apply_settings(session, reason="didChangeConfiguration")


async def _pull_section(session: Session) -> dict[str, Any] | None:
    """The client's `dspark` section, pulled with workspace/configuration (None: no usable answer)."""
    timeout = pull_timeout_s()
    try:
        items = [types.ConfigurationItem(section=SECTION)]
        pull = session.server.workspace_configuration_async(types.ConfigurationParams(items=items))
        # Shielded: a late answer then completes the request as usual (cancelled, pygls would
        # fail setting its result); only this handler stops waiting.
        answer = await asyncio.wait_for(asyncio.shield(pull), timeout)
        pulled: Any = answer[0] if answer else None
        return pulled if isinstance(pulled, dict) else None
    except asyncio.TimeoutError:  # (TimeoutError itself only from Python 3.11)
        log.warning(
            "workspace/configuration: no answer from the client in %.1f s; settings unchanged",
            timeout,
        )
    except Exception as exc:
        log.warning("workspace/configuration failed: %s", exc)
    return None


def _can_pull(session: Session) -> bool:
    try:
        workspace = session.server.client_capabilities.workspace
    except Exception:
        return False
    return bool(workspace is not None and workspace.configuration)
