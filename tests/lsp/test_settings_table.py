"""Issue 34: the settings table (dspark_lsp/settings_schema.py) is the only place a setting is declared.

ServiceConfig takes its name map and its range checks from the table, `backend` is in it (its object
form parsed by remote/config.py), and the table's module loads without torch or the LSP libraries.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_lsp import settings_schema as table
from dspark_lsp.remote.config import RemoteSettings
from dspark_lsp.service import ServiceConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_imports_no_torch_and_no_lsp_library() -> None:
    code = (
        "import sys, dspark_lsp.settings_schema, dspark_lsp.lsp.settings_schema\n"
        "print(sorted(m for m in ('torch', 'pygls', 'lsprotocol', 'dspark_lsp.service') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_service_config_fields_are_the_tables_service_settings() -> None:
    """One Setting + one ServiceConfig field per setting: a field without an entry (or the reverse) fails."""
    config_fields = {f.name for f in dataclasses.fields(ServiceConfig)}
    assert set(table.SERVICE_FIELDS.values()) == config_fields
    assert ServiceConfig.SETTINGS == table.SERVICE_FIELDS
    assert table.SERVICE_FIELDS["maxNewTokens"] == "max_new_tokens" and table.SERVICE_FIELDS["kMin"] == "k_min"
    assert table.LSP_ONLY == {"enable", "debounceMs"}


def test_service_config_reads_its_bounds_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is written once: widening the table's entry widens ServiceConfig's check with it."""
    assert ServiceConfig(max_new_tokens=3000).problems() == ["maxNewTokens must be an integer in [1, 2048]"]
    wider = tuple(
        dataclasses.replace(s, maximum=4096) if s.name == "maxNewTokens" else s for s in table.SERVICE_SETTINGS
    )
    monkeypatch.setattr(table, "SERVICE_SETTINGS", wider)
    assert ServiceConfig(max_new_tokens=3000).problems() == []


def test_kmin_above_kmax_is_the_one_rule_between_fields() -> None:
    assert ServiceConfig(k_min=3, k_max=1).problems() == ["kMin must be at most kMax, got kMin 3 > kMax 1"]
    # Out of range is reported by the range check alone, not twice.
    assert ServiceConfig(k_min=17, k_max=5).problems() == ["kMin must be an integer in [1, 16]"]
    cfg, problems = ServiceConfig.from_settings({"kMin": 6})
    assert cfg.k_min == 1 and problems == ["invalid kMin=6: kMin must be at most kMax, got kMin 6 > kMax 5; using 1"]


def test_backend_is_an_object_entry_parsed_by_remote_config() -> None:
    backend = table.BY_NAME["backend"]
    assert backend.kind == "object" and not backend.in_editors and backend.field_name == "backend"
    assert backend.check(None) and backend.check(RemoteSettings(url="http://h:1"))
    assert not backend.check(RemoteSettings(url="h:1")) and not backend.check("http://h:1")
    # The LSP layer hands it on as sent: its parser reports in its fields' words, once.
    assert table.validate({"backend": {"url": "h:1"}}) == ({"backend": {"url": "h:1"}}, [])
    cfg, problems = ServiceConfig.from_settings({"backend": {"url": "http://h:1", "bogus": 1}})
    assert cfg.backend == RemoteSettings(url="http://h:1") and problems == ["unknown backend setting 'bogus' ignored"]
    assert ServiceConfig(backend=RemoteSettings(url="http://h:1", timeout_ms=5)).problems() == [
        "backend.timeoutMs must be an integer in [100, 600000]"
    ]


def test_a_malformed_entry_fails_at_import() -> None:
    with pytest.raises(ValueError, match="object kind"):
        table.Setting("x", "string", None, "", parse=lambda v: (v, []), value_problems=lambda v: [])
    with pytest.raises(ValueError, match="object kind"):
        table.Setting("y", "object", None, "", in_editors=False)
    with pytest.raises(ValueError, match="scalar settings only"):
        table.Setting("z", "object", None, "", parse=lambda v: (v, []), value_problems=lambda v: [])


def test_eval_raw_budget_uses_the_tables_bound() -> None:
    from dspark_lsp.cli import build_parser
    from dspark_lsp.errors import UserError
    from dspark_lsp.evaluation.cli import _check_args

    args = build_parser().parse_args(["eval", "--raw-max-tokens", "2049"])
    with pytest.raises(UserError, match=r"--raw-max-tokens must be an integer in \[1, 2048\], got 2049"):
        _check_args(args)
