"""The model cache survives faults (issue 19): two prepares at once, kill -9 in the middle, a full disk.

Uses the fake part packages and the copying converter of test_models_prepare.py (no 500 MB files). The
kill tests run `prepare_model` in a child process that stops at a chosen point (it writes a marker file
and sleeps); the test kills it with SIGKILL there, then checks that nothing reads the half-written state
as a model and that the next prepare repairs it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from test_models_prepare import BLOB, NAME, CopyConverter, FakeInstaller, leftovers, make_spec

from dspark_lsp.errors import ModelError, ModelNotPrepared
from dspark_lsp.models import cache, prepare, registry
from dspark_lsp.models.loader import resolve_model
from dspark_lsp.models.prepare import prepare_model

TESTS = Path(__file__).parent
pytestmark = pytest.mark.timeout(120)

# A child that prepares the fake model. STOP names where it stops (marker file, then sleep) or "slow"
# (a 1.5 s conversion, to overlap with another child); it prints "DONE <converter calls>" at the end.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from test_models_prepare import NAME, CopyConverter, FakeInstaller, make_spec
    from dspark_lsp.models import cache, prepare, registry

    root, site, stop, marker = Path(sys.argv[3]), Path(sys.argv[2]), sys.argv[4], Path(sys.argv[5])
    registry.KNOWN_MODELS[NAME] = make_spec()

    def halt(where):
        marker.write_text(where)
        time.sleep(600)

    class Converter(CopyConverter):
        def __call__(self, gguf, out_dir, progress):
            if stop == "convert":
                (out_dir / "model.safetensors").write_bytes(b"half of the weights")
                halt("convert")
            if stop == "slow":
                marker.write_text("converting")
                time.sleep(1.5)
            super().__call__(gguf, out_dir, progress)

    if stop == "join":
        real_join = prepare.join_parts
        def join_parts(files, dest, progress=True):
            dest.write_bytes(b"the first bytes of the gguf")
            halt("join")
        prepare.join_parts = join_parts
    if stop == "manifest":
        def write_manifest(directory, manifest):
            halt("manifest")
        cache.write_manifest = write_manifest
    conv = Converter()
    prepare.prepare_model(NAME, root, progress=False, installer=FakeInstaller(site), converter=conv,
                          log=lambda m: None)
    print("DONE", conv.calls, flush=True)
    """
)


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, FakeInstaller]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(registry.KNOWN_MODELS, NAME, make_spec())
    return tmp_path / "cache", site, FakeInstaller(site)


def child(root: Path, site: Path, stop: str, marker: Path) -> subprocess.Popen[str]:
    script = root.parent / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), str(TESTS), str(site), str(root), stop, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(marker: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child ended early: {proc.communicate()}")
        assert time.monotonic() < deadline, "the child never reached its stop"
        time.sleep(0.02)


def assert_not_loadable(root: Path, *, gguf_verified: bool = False) -> None:
    """What the server's loader does with the cache: refuse, with the command that repairs it. The
    quantized path's GGUF counts only once joined and verified (renamed from its .partial)."""
    assert not cache.is_ready(cache.model_dir(root, NAME), NAME, make_spec().sha256)
    with pytest.raises(ModelNotPrepared, match=rf"run: dspark-lsp models prepare {NAME}"):
        resolve_model(NAME, root)
    kept = cache.kept_gguf(root, "fake.gguf", len(BLOB))
    if gguf_verified:
        assert kept is not None and kept.read_bytes() == BLOB
    else:
        assert kept is None


def test_two_prepares_at_once_convert_once_and_both_succeed(env: tuple[Path, Path, FakeInstaller]) -> None:
    root, site, _ = env
    first = child(root, site, "slow", root.parent / "first.marker")
    wait_for(root.parent / "first.marker", first)  # the first is converting, holding the lock
    second = child(root, site, "slow", root.parent / "second.marker")
    outs = [p.communicate(timeout=90) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    # The second waited for the lock, then found the model ready: one conversion in all.
    assert [o[0].split() for o in outs] == [["DONE", "1"], ["DONE", "0"]], outs
    assert not (root.parent / "second.marker").exists()
    resolved = resolve_model(NAME, root)
    assert isinstance(resolved, Path) and (resolved / "model.safetensors").read_bytes() == BLOB
    assert cache.stale_paths(root) == []


@pytest.mark.parametrize("stop", ["join", "convert", "manifest"])
def test_kill_9_in_the_middle_then_the_next_prepare_repairs(
    env: tuple[Path, Path, FakeInstaller], stop: str
) -> None:
    root, site, installer = env
    marker = root.parent / "stop.marker"
    proc = child(root, site, stop, marker)
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    # What was left is half-written, and nothing takes it for a model.
    left = leftovers(root)
    expected_leftover = {
        "join": "gguf/fake.gguf.partial",
        "convert": f"models/.{NAME}.tmp-",
        "manifest": f"models/{NAME}/model.safetensors",
    }[stop]
    assert any(p.startswith(expected_leftover) for p in left), left
    assert_not_loadable(root, gguf_verified=stop != "join")
    # The next run cleans the leftovers and redoes the work.
    messages: list[str] = []
    out = prepare_model(
        NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=messages.append
    )
    assert (out / "model.safetensors").read_bytes() == BLOB
    assert cache.is_ready(out, NAME, make_spec().sha256)
    assert cache.stale_paths(root) == []
    assert any("leftover" in m for m in messages), messages


def _full(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_while_writing_the_manifest_leaves_nothing_and_says_so(
    env: tuple[Path, Path, FakeInstaller], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, installer = env
    real_write = cache.write_manifest

    def write_then_full(directory: Path, manifest: cache.Manifest) -> Path:
        (directory / (cache.MANIFEST_NAME + cache.PARTIAL_SUFFIX)).write_text('{"name": "fake-mo')
        _full()
        return real_write(directory, manifest)

    monkeypatch.setattr(cache, "write_manifest", write_then_full)
    with pytest.raises(ModelError, match=r"^disk full while writing the manifest of fake-model in "):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=print)
    monkeypatch.undo()
    monkeypatch.setitem(registry.KNOWN_MODELS, NAME, make_spec())
    # Before the fix the converted directory stayed (not ready, but holding the space a full disk needs).
    assert not cache.model_dir(root, NAME).exists(), leftovers(root)
    assert cache.stale_paths(root) == []
    with pytest.raises(ModelNotPrepared, match="not prepared"):
        resolve_model(NAME, root)
    out = prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=print)
    assert cache.is_ready(out, NAME, make_spec().sha256)


def test_full_disk_while_joining_then_a_retry_works(
    env: tuple[Path, Path, FakeInstaller], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, installer = env
    real_join = prepare.join_parts

    def join_then_full(files: list[Path], dest: Path, progress: bool = True) -> str:
        dest.write_bytes(BLOB[:1000])  # some bytes made it to disk before the write failed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prepare, "join_parts", join_then_full)
    with pytest.raises(
        ModelError, match=r"^disk full while preparing fake-model in .*free some space and retry"
    ):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=print)
    assert_not_loadable(root)
    assert leftovers(root) == ["gguf", "models"]  # the partial join is gone
    monkeypatch.setattr(prepare, "join_parts", real_join)
    out = prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=print)
    assert (out / "model.safetensors").read_bytes() == BLOB


def test_full_disk_at_the_lock_file_is_one_clear_error(
    env: tuple[Path, Path, FakeInstaller], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, installer = env
    (root / "models").mkdir(parents=True)
    real_open = open

    def open_or_full(path: object, *args: object, **kwargs: object) -> object:
        if str(path).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    # Before the fix: a raw OSError (a traceback from `models prepare`).
    monkeypatch.setattr(prepare, "open", open_or_full, raising=False)
    with pytest.raises(ModelError, match=r"^disk full while creating the lock file \.fake-model\.lock"):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=print)
    assert_not_loadable(root)


# A child that exports a token draft (step 2) over an existing export and is killed (SIGKILL) at STOP:
# "weights" = half the safetensors file written, "rename" = the old export moved aside, not yet replaced.
DRAFT_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import torch
    from dspark_lsp.drafts import io
    from dspark_lsp.drafts.token.config import DraftNetConfig
    from dspark_lsp.drafts.token.model import DraftNet
    from dspark_lsp.drafts.vocab import DraftVocab

    out, stop, marker = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])

    def halt():
        marker.write_text(stop)
        time.sleep(600)

    real_save, real_replace = io.save_file, os.replace
    def save_file(state, path, metadata=None):
        real_save(state, path, metadata=metadata)
        if stop == "weights":
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[: len(data) // 2])
            halt()
    def replace(src, dst):
        real_replace(src, dst)
        if stop == "rename" and ".old-" in str(dst):
            halt()
    io.save_file, os.replace = save_file, replace
    io.save_draft(out, DraftNet(DraftNetConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2)),
                  DraftVocab(list(range(8)), 64), {"step": 2})
    """
)


def _tiny_draft() -> tuple[Any, Any]:
    import torch

    from dspark_lsp.drafts.token.config import DraftNetConfig
    from dspark_lsp.drafts.token.model import DraftNet
    from dspark_lsp.drafts.vocab import DraftVocab

    torch.manual_seed(0)
    return DraftNet(DraftNetConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2)), DraftVocab(list(range(8)), 64)


def _step(out: Path) -> object:
    return json.loads((out / "vocab.json").read_text())["step"]


def test_a_truncated_draft_weights_file_is_one_clear_model_error(tmp_path: Path) -> None:
    """Before the fix: safetensors' own SafetensorError (a traceback in the server's log, no fix named)."""
    from dspark_lsp.drafts.io import WEIGHTS, load_draft_net, save_draft

    out = tmp_path / "export"
    save_draft(out, *_tiny_draft(), {"step": 1})
    load_draft_net(out)  # whole: loads
    weights = out / WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a hand copy cut short
    with pytest.raises(ModelError) as info:
        load_draft_net(out)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"draft weights {weights} are damaged or truncated")
    assert message.endswith(f"export the draft again or delete {out}")


@pytest.mark.parametrize("name", ["draft_config.json", "vocab.json"])
def test_a_damaged_draft_json_file_is_one_clear_model_error(tmp_path: Path, name: str) -> None:
    from dspark_lsp.drafts.io import load_draft_net, save_draft

    out = tmp_path / "export"
    save_draft(out, *_tiny_draft(), {"step": 1})
    (out / name).write_text('{"target_ids": [1, 2')  # cut mid-write
    with pytest.raises(ModelError, match=rf"^draft (config|vocab) file {re.escape(str(out / name))} is damaged"):
        load_draft_net(out)


def test_a_truncated_feature_draft_is_one_clear_model_error(tmp_path: Path) -> None:
    import torch

    from dspark_lsp.drafts.feature.config import FeatDraftConfig
    from dspark_lsp.drafts.feature.model import FeatDraft
    from dspark_lsp.drafts.io import WEIGHTS, load_feat_draft, save_feat_draft
    from dspark_lsp.drafts.vocab import DraftVocab

    torch.manual_seed(0)
    dv = DraftVocab(list(range(8)), 64)
    cfg = FeatDraftConfig(d_model=16, n_heads=2, d_ff=32, vocab_size=dv.size, target_vocab_size=64)
    out = tmp_path / "feat"
    save_feat_draft(out, FeatDraft(cfg), dv, {"step": 3})
    assert load_feat_draft(out)[2] == {"step": 3}
    weights = out / WEIGHTS
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelError, match=rf"^feature draft weights {re.escape(str(weights))} are damaged"):
        load_feat_draft(out)
    (out / "vocab.json").write_text("[1, 2, 3]")  # JSON, but not the object it should be
    with pytest.raises(ModelError, match=r"^feature draft vocab file .* is damaged"):
        load_feat_draft(out)


def _export_killed_at(tmp_path: Path, stop: str) -> Path:
    """An export (step 1) overwritten by a child export (step 2) that is SIGKILLed at ``stop``."""
    from dspark_lsp.drafts.io import save_draft

    out = tmp_path / "export"
    save_draft(out, *_tiny_draft(), {"step": 1})
    script, marker = tmp_path / "draft_child.py", tmp_path / "draft.marker"
    script.write_text(DRAFT_CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), stop, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    return out


def test_a_draft_export_killed_mid_write_never_loads_half_written(tmp_path: Path) -> None:
    """kill -9 while the weights are half on disk. Before the fix (in-place writes) the export's own
    model.safetensors was the half file and loading raised SafetensorError; now the half file is in a
    temp dir nothing loads, the previous export stays whole, and the next export removes the leftover."""
    from dspark_lsp.drafts.io import load_draft_net, save_draft

    out = _export_killed_at(tmp_path, "weights")
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".export."))
    assert len(leftovers) == 1 and leftovers[0].startswith(".export.tmp-"), leftovers
    load_draft_net(out)  # the previous export, whole
    assert _step(out) == 1
    save_draft(out, *_tiny_draft(), {"step": 3})
    assert _step(out) == 3
    load_draft_net(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export.")] == []


def test_a_draft_export_killed_between_its_renames_restores_the_previous_one(tmp_path: Path) -> None:
    """kill -9 after the old export was moved aside and before the new one took its name: the name is
    briefly empty; the next export (or clean_stale_exports) puts the whole old one back first."""
    from dspark_lsp.drafts.io import clean_stale_exports, load_draft_net

    out = _export_killed_at(tmp_path, "rename")
    assert not out.exists()
    clean_stale_exports(out)
    load_draft_net(out)
    assert _step(out) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export.")] == []


def test_a_failing_draft_export_leaves_the_previous_one_and_no_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dspark_lsp.drafts import io

    out = tmp_path / "export"
    io.save_draft(out, *_tiny_draft(), {"step": 1})

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io, "save_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        io.save_draft(out, *_tiny_draft(), {"step": 2})
    assert _step(out) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_an_export_leaves_a_live_writers_temp_dir_alone(tmp_path: Path) -> None:
    """Two exports at once into one name: neither deletes the other's temp dir while it is alive."""
    from dspark_lsp.drafts.io import clean_stale_exports

    out = tmp_path / "export"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".export.tmp-{sleeper.pid}-abc"
        dead = tmp_path / ".export.tmp-999999999-abc"
        live.mkdir()
        dead.mkdir()
        clean_stale_exports(out)
        assert live.is_dir() and not dead.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
