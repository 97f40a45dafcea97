"""GGUF blocks -> kernel layout (dspark_lsp.quant.blocks) and the GGUF reader (dspark_lsp.quant.gguf_file).

The contract: for every supported type the packed values are the gguf package's own dequantization bit
for bit (compared as uint32), read back from a real file written by ``gguf.GGUFWriter``; malformed input
is a ValueError / UnsupportedType / GGUFError with a message saying what is wrong, never another error.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from quant_testlib import (
    K_QUANTS,
    SIMPLE,
    SUPPORTED,
    T,
    block_sizes,
    quantized_bytes,
    random_blocks,
    reference_values,
    write_gguf,
)

from dspark_lsp.quant import blocks
from dspark_lsp.quant.gguf_file import GGUFError, open_gguf

IDS = [t.name for t in SUPPORTED]
_BITS = {T.Q4_0: 4, T.Q4_1: 4, T.Q5_0: 5, T.Q5_1: 5, T.Q8_0: 8, T.Q4_K: 4, T.Q5_K: 5, T.Q6_K: 6}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def assert_bit_identical(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and want.dtype == np.float32
    assert got.shape == want.shape
    diff = _bits(got) != _bits(want)
    if diff.any():
        idx = tuple(int(i) for i in np.argwhere(diff)[0])
        raise AssertionError(f"{int(diff.sum())} of {diff.size} values differ; first at {idx}: "
                             f"got {got[idx]!r}, want {want[idx]!r}")


def _row_length(qtype: T) -> int:
    return 512 if qtype in K_QUANTS else 96


def _tensors_for(qtype: T, rng: np.random.Generator) -> list[tuple[str, np.ndarray, T]]:
    """Several matrices of ``qtype``: quantized normals (types the package quantizes), random blocks
    with moderate scales, random blocks with edge-case fp16 scales, and a single row."""
    k = _row_length(qtype)
    out = []
    if qtype in SIMPLE:
        x = rng.standard_normal((7, k)).astype(np.float32) * rng.uniform(0.01, 4.0, (7, 1)).astype(np.float32)
        out.append(("w.quantized", quantized_bytes(qtype, x, 7, k, rng), qtype))
    out.append(("w.random", random_blocks(qtype, 5, k, rng), qtype))
    out.append(("w.special", random_blocks(qtype, 9, k, rng, scale=3.0, special=True), qtype))
    out.append(("w.one_row", random_blocks(qtype, 1, k, rng), qtype))
    return out


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_file_values_are_gguf_dequantize_bit_for_bit(tmp_path: Path, qtype: T) -> None:
    rng = np.random.default_rng(int(qtype))
    written = _tensors_for(qtype, rng)
    path = write_gguf(tmp_path / "w.gguf", written + [("norm.weight", rng.standard_normal(32).astype(np.float32),
                                                        T.F32)])
    g = open_gguf(path)
    assert g.arch == "qwen2" and g.version == 3
    # The index agrees with the gguf package's own reader.
    theirs = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    assert set(g.tensors) == set(theirs)
    for name, info in g.tensors.items():
        assert info.shape == tuple(int(d) for d in theirs[name].shape)
        assert info.qtype == int(theirs[name].tensor_type)
        assert info.offset == int(theirs[name].data_offset)
        assert info.nbytes == int(theirs[name].n_bytes)

    for name, raw_written, _ in written:
        info = g.tensors[name]
        n, k = info.rows_cols
        assert (n, k) == (raw_written.shape[0], _row_length(qtype))
        assert info.qtype == int(qtype)
        raw = g.read(name)
        assert raw.dtype == np.uint8 and np.array_equal(raw, raw_written.reshape(-1))
        want = reference_values(raw, qtype, n, k)

        packed = blocks.pack_tensor(raw, int(qtype), n, k)
        assert (packed.n, packed.k, packed.source_type) == (n, k, int(qtype))
        assert packed.kind in (4, 8)
        # kind 4: two codes per byte; kind 8: one signed byte per weight (blocks.Packed).
        assert packed.codes.dtype == (np.uint8 if packed.kind == 4 else np.int8)
        assert packed.codes.size == (n * k // 2 if packed.kind == 4 else n * k)
        assert packed.nbytes < n * k * 4  # smaller than the fp32 matrix it stands for
        assert_bit_identical(packed.values(), want)

        # parse() alone: scale * (code - shift) + offset in fp32 is the reference (blocks' docstring).
        c = blocks.parse(raw, int(qtype), n, k)
        q = (c.codes.astype(np.int32) - c.shift).astype(np.float32).reshape(n, k // 32, 32)
        per = c.scale.shape[1] // (k // 32)
        s = np.repeat(c.scale.reshape(n, k // 32, per), 32 // per, axis=2)
        v = s * q
        if c.off is not None:
            v = v + c.off.reshape(n, k // 32, 1)
        assert_bit_identical(v.reshape(n, k).astype(np.float32), want)
        assert c.bits == _BITS[qtype]
        if c.bits == 8:
            assert c.codes.dtype == np.int8 and c.shift == 0
        else:
            assert 0 <= int(c.codes.min()) and int(c.codes.max()) < 2**c.bits


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_chunked_packing_equals_whole(monkeypatch: pytest.MonkeyPatch, qtype: T) -> None:
    rng = np.random.default_rng(100 + int(qtype))
    n, k = 10, _row_length(qtype)
    raw = random_blocks(qtype, n, k, rng)
    whole = blocks.pack_tensor(raw, int(qtype), n, k)
    monkeypatch.setattr(blocks, "_CHUNK_ROWS", 3)  # 4 chunks: 3 + 3 + 3 + 1 rows
    chunked = blocks.pack_tensor(raw, int(qtype), n, k)
    assert (chunked.kind, chunked.shift, chunked.n, chunked.k) == (whole.kind, whole.shift, n, k)
    assert np.array_equal(chunked.codes.reshape(-1), whole.codes.reshape(-1))
    assert_bit_identical(chunked.values(), reference_values(raw, qtype, n, k))


def test_concat_rows_stacks_same_layouts_and_refuses_mixed_ones() -> None:
    rng = np.random.default_rng(5)
    k = 256
    parts = [blocks.pack_tensor(random_blocks(t, n, k, rng), int(t), n, k)
             for t, n in ((T.Q8_0, 3), (T.Q5_0, 5), (T.Q8_0, 2))]
    joined = blocks.concat_rows(parts)
    assert joined is not None and joined.n == 10 and joined.k == k
    assert_bit_identical(joined.values(), np.concatenate([p.values() for p in parts]))
    affine = [blocks.pack_tensor(random_blocks(t, 4, k, rng), int(t), 4, k) for t in (T.Q4_1, T.Q4_K)]
    joined = blocks.concat_rows(affine)
    assert joined is not None
    assert_bit_identical(joined.values(), np.concatenate([p.values() for p in affine]))
    # Different code layouts, zero points, scale shapes or offsets: no single matrix.
    for a, b in ((T.Q4_0, T.Q8_0), (T.Q4_0, T.Q4_1), (T.Q8_0, T.Q6_K), (T.Q5_0, T.Q5_1)):
        pa, pb = (blocks.pack_tensor(random_blocks(t, 2, k, rng), int(t), 2, k) for t in (a, b))
        assert blocks.concat_rows([pa, pb]) is None, (a.name, b.name)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_size_and_shape_mismatches_are_value_errors(monkeypatch: pytest.MonkeyPatch, qtype: T) -> None:
    rng = np.random.default_rng(7)
    per, size = block_sizes(qtype)
    n, k = 4, _row_length(qtype)
    raw = random_blocks(qtype, n, k, rng)
    for fn in (blocks.parse, blocks.pack_tensor):
        with pytest.raises(ValueError, match=rf"should hold {(n + 1) * k // per * size} bytes, not {raw.size}"):
            fn(raw, int(qtype), n + 1, k)
        with pytest.raises(ValueError, match="should hold"):
            fn(raw.reshape(-1)[:-1], int(qtype), n, k)
        with pytest.raises(ValueError, match="should hold"):
            fn(raw, int(qtype), n, k * 2)
        if per == 256:  # a row of whole 32-blocks that is not whole super-blocks
            with pytest.raises(ValueError, match=rf"row length {k + 32} is not a multiple of the {qtype.name} "
                                                 rf"block size 256"):
                fn(raw, int(qtype), n, k + 32)
        with pytest.raises(ValueError, match=rf"row length {k + 16} is not a multiple"):
            fn(raw, int(qtype), n, k + 16)
    monkeypatch.setattr(blocks, "_CHUNK_ROWS", 2)  # the chunked path checks sizes too
    with pytest.raises(ValueError, match="should hold"):
        blocks.pack_tensor(raw, int(qtype), n + 1, k)
    with pytest.raises(ValueError, match="should hold"):
        blocks.pack_tensor(raw.reshape(-1)[:-size], int(qtype), n, k)


@pytest.mark.parametrize("qtype", [T.Q2_K, T.Q3_K, T.F32, T.F16, T.BF16, T.IQ4_NL, 99], ids=str)
def test_unsupported_types_raise_unsupported_type(qtype: int) -> None:
    raw = np.zeros(4096, np.uint8)
    for fn in (blocks.parse, blocks.pack_tensor):
        with pytest.raises(blocks.UnsupportedType, match="not supported by the kernel") as info:
            fn(raw, int(qtype), 4, 256)
        assert isinstance(info.value, ValueError)
        name = blocks.TYPE_NAMES.get(int(qtype), str(int(qtype)))
        assert name in str(info.value)


# ------------------------------------------------------------------------------------------ the reader
def _sample_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    return write_gguf(
        tmp_path / "sample.gguf",
        [("tensor.q8", quantized_bytes(T.Q8_0, None, 4, 64, rng), T.Q8_0),
         ("tensor.k6", random_blocks(T.Q6_K, 2, 256, rng), T.Q6_K),
         ("tensor.f32", rng.standard_normal((3, 32)).astype(np.float32), T.F32)],
        kv={"general.name": "sample", "general.alignment": 32},
    )


def _entry_pos(data: bytes, name: str) -> int:
    """Offset just after tensor ``name``'s name in the tensor index (where its ndim field starts)."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key)
    return at + len(key)


def _data_start(path: Path) -> int:
    return min(t.offset for t in open_gguf(path).tensors.values())


def test_garbage_and_missing_files_are_gguf_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(GGUFError, match=r"is not a GGUF file \(bad magic\)"):
        open_gguf(junk)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        open_gguf(empty)
    text = tmp_path / "config.json"
    text.write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    with pytest.raises(GGUFError, match="not a GGUF file"):
        open_gguf(text)
    with pytest.raises(GGUFError, match="cannot open"):
        open_gguf(tmp_path / "missing.gguf")
    with pytest.raises(GGUFError, match="cannot open"):
        open_gguf(tmp_path)  # a directory
    good = _sample_file(tmp_path).read_bytes()
    bad_version = tmp_path / "v9.gguf"
    bad_version.write_bytes(good[:4] + struct.pack("<I", 9) + good[8:])
    with pytest.raises(GGUFError, match="GGUF version 9 is not supported"):
        open_gguf(bad_version)
    magic_only = tmp_path / "magic.gguf"
    magic_only.write_bytes(b"GGUF")
    with pytest.raises(GGUFError, match="truncated"):
        open_gguf(magic_only)


def test_truncated_files_are_gguf_errors(tmp_path: Path) -> None:
    path = _sample_file(tmp_path)
    data = path.read_bytes()
    g = open_gguf(path)
    start = _data_start(path)
    last = max(g.tensors.values(), key=lambda t: t.offset)
    end = last.offset + last.nbytes
    cut = tmp_path / "cut.gguf"

    # In the middle of tensor data: the message names the file, the tensor and says "truncated".
    mid = g.tensors["tensor.k6"]
    cut.write_bytes(data[: mid.offset + mid.nbytes // 2])
    with pytest.raises(GGUFError, match=r"is truncated: tensor tensor\.k6 ends at byte"):
        open_gguf(cut)
    # In the header: in the metadata, and in the tensor index.
    cut.write_bytes(data[:40])
    with pytest.raises(GGUFError, match=r"unexpected end of file in the header \(truncated\?\)"):
        open_gguf(cut)
    cut.write_bytes(data[: _entry_pos(data, "tensor.k6") + 6])
    with pytest.raises(GGUFError, match="truncated"):
        open_gguf(cut)

    # Every cut before the last tensor's end is refused, and with a GGUFError (never another exception).
    cut.write_bytes(data)
    with open(cut, "r+b") as fh:
        for n in [*range(end - 1, start, -13), *range(start, -1, -1)]:  # shrinking in place is cheap
            fh.truncate(n)
            fh.flush()
            with pytest.raises(GGUFError):
                open_gguf(cut)
    cut.write_bytes(data[:end])  # only the trailing alignment padding missing: still complete
    assert set(open_gguf(cut).tensors) == set(g.tensors)


def test_file_cut_after_opening_is_a_gguf_error_on_read(tmp_path: Path) -> None:
    path = _sample_file(tmp_path)
    g = open_gguf(path)
    t = g.tensors["tensor.q8"]
    data = path.read_bytes()
    path.write_bytes(data[: t.offset + 10])
    with pytest.raises(GGUFError, match=rf"tensor tensor\.q8 is cut short \(10 of {t.nbytes} bytes\)"):
        g.read("tensor.q8")


def test_corrupt_tensor_entries_are_gguf_errors(tmp_path: Path) -> None:
    path = _sample_file(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "bad.gguf"
    at = _entry_pos(data, "tensor.q8")
    ndim = struct.unpack_from("<I", data, at)[0]
    type_at = at + 4 + 8 * ndim

    cases = [  # (struct format, byte offset, value, the error it must give)
        ("<I", type_at, 200, "unknown tensor type 200"),  # no such ggml type
        ("<Q", at + 4, 48, "row length 48 is not a multiple of the block size 32"),  # not whole Q8_0 blocks
        ("<I", at, 40, "corrupt tensor entry 'tensor.q8'"),  # absurd number of dimensions
        ("<Q", at + 4 + 8, 4000, r"is truncated: tensor tensor\.q8"),  # 4000 rows: past the end of the file
        ("<Q", 16, 2**40, "corrupt header"),  # metadata count
    ]
    for fmt, offset, value, error in cases:
        b = bytearray(data)
        struct.pack_into(fmt, b, offset, value)
        bad.write_bytes(bytes(b))
        with pytest.raises(GGUFError, match=error):
            open_gguf(bad)


def _corrupt(tmp_path: Path, what: str) -> Path:
    """The sample file with one header field set to a corrupt value (see the xfail tests below)."""
    rng = np.random.default_rng(4)
    path = tmp_path / f"{what}.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    if what == "alignment0":
        w.add_uint32("general.alignment", 0)
    w.add_array("test.ints", [1, 2, 3])
    w.add_array("test.strings", ["ab", "cd"])
    w.add_tensor("tensor.f32", rng.standard_normal((2, 32)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    b = bytearray(path.read_bytes())
    if what == "array_count":  # the int array's element count (u64 after "test.ints", its type, etype)
        at = b.index(b"test.ints") + len("test.ints") + 4 + 4
        struct.pack_into("<Q", b, at, 2**62)
    elif what == "string_length":  # the first string of the string array
        at = b.index(b"test.strings") + len("test.strings") + 4 + 4 + 8
        struct.pack_into("<Q", b, at, 2**63)
    elif what == "dims_overflow":  # dims whose product overflows int64
        at = _entry_pos(bytes(b), "tensor.f32") + 4
        struct.pack_into("<QQ", b, at, 2**32, 2**32)
    elif what == "dims_negative":
        at = _entry_pos(bytes(b), "tensor.f32") + 4
        struct.pack_into("<QQ", b, at, 2**62, 3)
    path.write_bytes(bytes(b))
    return path


# Corrupt header fields that once escaped open_gguf as other exceptions (found by these tests, fixed in
# gguf_file.py): what went wrong, and what escaped.
_GGUF_BUGS: dict[str, tuple[str, type[BaseException] | tuple[type[BaseException], ...]]] = {
    "alignment0": ("gguf_file.py:169 `-(-fh.tell() // align) * align` divides by general.alignment: 0 gives "
                   "ZeroDivisionError, not GGUFError", ZeroDivisionError),
    "array_count": ("gguf_file.py:121 _Reader.skip_value seeks _FIXED[etype] * count before checking it against "
                    "the file size: a huge array count raises ValueError('cannot fit int into an offset-sized "
                    "integer') or OSError(EINVAL) from seek(), not GGUFError", (ValueError, OSError)),
    "string_length": ("gguf_file.py:117 _Reader.skip_value seeks a skipped string's length unchecked: a length "
                      ">= 2**63 raises ValueError from seek(), not GGUFError", (ValueError, OSError)),
    "dims_overflow": ("gguf_file.py:76 `int(np.prod(shape))` wraps around in int64: dims 2**32 x 2**32 give "
                      "nbytes 0 and open_gguf accepts the corrupt entry", pytest.fail.Exception),
    "dims_negative": ("gguf_file.py:76 `int(np.prod(shape))` wraps to a negative nbytes that passes the size "
                      "check at line 173; open_gguf accepts it and read() raises numpy's ValueError", ValueError),
}


@pytest.mark.parametrize(
    "what",
    list(_GGUF_BUGS),
)
def test_corrupt_header_fields_are_gguf_errors(tmp_path: Path, what: str) -> None:
    path = _corrupt(tmp_path, what)
    with pytest.raises(GGUFError):
        g = open_gguf(path)
        for name in g.tensors:
            g.read(name)


def test_any_corrupt_header_byte_is_a_gguf_error_or_loads(tmp_path: Path) -> None:
    path = _sample_file(tmp_path)
    data = path.read_bytes()
    start = _data_start(path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data)
    escaped = []
    with open(bad, "r+b") as fh:  # patch one byte at a time in place (rewriting files is slow on tmpfs overlays)
        for pos in range(start):
            for val in (0x00, 0x7F, 0xFF, data[pos]):
                fh.seek(pos)
                fh.write(bytes([val]))
                fh.flush()
                if val == data[pos]:
                    continue  # restored
                try:
                    g = open_gguf(bad)
                    for name in g.tensors:
                        g.read(name)
                except GGUFError:
                    pass
                except Exception as exc:  # noqa: BLE001 - the point of the test
                    escaped.append((pos, val, type(exc).__name__))
    assert not escaped, escaped[:10]
