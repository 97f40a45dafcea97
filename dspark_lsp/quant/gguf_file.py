"""A minimal GGUF reader: the header, the metadata we need, and each tensor's bytes on demand.

The ``gguf`` package's reader builds a numpy view for every metadata element — 17 s for the 0.5B file
on two cores, nearly all of it the tokenizer's 151,936-entry vocabulary — while loading weights needs
only the tensor index. This reader skips what it does not keep and reads tensor data with plain file
reads (no memory map, so the file's pages do not stay counted in the process's resident memory).
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (version 2 and 3).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dspark_lsp.quant.blocks import BF16, BLOCK, F16, F32

MAGIC = b"GGUF"
# metadata value types
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_FIXED = {_U8: 1, _I8: 1, _U16: 2, _I16: 2, _U32: 4, _I32: 4, _F32: 4, _BOOL: 1, _U64: 8, _I64: 8, _F64: 8}
_FMT = {_U8: "<B", _I8: "<b", _U16: "<H", _I16: "<h", _U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?",
        _U64: "<Q", _I64: "<q", _F64: "<d"}
_KEEP = ("general.architecture", "general.alignment", "general.file_type")
_FLOAT_SIZES = {F32: 4, F16: 2, BF16: 2}


class GGUFError(ValueError):
    """Not a GGUF file, or a truncated / corrupt one."""


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the contiguous (row) length
    qtype: int
    offset: int  # absolute, in the file
    nbytes: int

    @property
    def rows_cols(self) -> tuple[int, int]:
        """(rows, cols) of a 2-D weight as the model sees it (ggml's ne1, ne0)."""
        cols = self.shape[0]
        rows = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else 1
        return rows, cols


@dataclass
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, object] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    def read(self, name: str) -> np.ndarray:
        """The raw bytes of tensor ``name`` (uint8), read from the file."""
        t = self.tensors[name]
        buf = np.empty(t.nbytes, dtype=np.uint8)
        with open(self.path, "rb") as fh:
            fh.seek(t.offset)
            got = fh.readinto(memoryview(buf))  # type: ignore[arg-type]  # numpy arrays are buffers
        if got != t.nbytes:
            raise GGUFError(f"{self.path}: tensor {name} is cut short ({got} of {t.nbytes} bytes): truncated file")
        return buf


def _tensor_nbytes(shape: tuple[int, ...], qtype: int) -> int:
    count = 1
    for d in shape:  # Python ints: a corrupt shape cannot wrap around as numpy's int64 product would
        count *= d
    if qtype in _FLOAT_SIZES:
        return count * _FLOAT_SIZES[qtype]
    if qtype in BLOCK:
        size, per = BLOCK[qtype]
        if shape[0] % per:
            raise GGUFError(f"row length {shape[0]} is not a multiple of the block size {per}")
        return count // per * size
    import gguf  # other types: the package knows their block sizes

    try:
        per, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    except (ValueError, KeyError):
        raise GGUFError(f"unknown tensor type {qtype}") from None
    return count // per * size


class _Reader:
    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.size = fh, size

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFError("unexpected end of file in the header (truncated?)")
        return data

    def num(self, vtype: int) -> object:
        return struct.unpack(_FMT[vtype], self.take(_FIXED[vtype]))[0]

    def string(self) -> str:
        n = int(self.num(_U64))  # type: ignore[call-overload]
        if n > self.size:
            raise GGUFError("corrupt string length in the header")
        return self.take(n).decode("utf-8", "replace")

    def _skip(self, n: int) -> None:
        if n < 0 or self.fh.tell() + n > self.size:
            raise GGUFError("metadata runs past the end of the file (truncated or corrupt?)")
        self.fh.seek(n, os.SEEK_CUR)

    def skip_value(self, vtype: int) -> None:
        if vtype in _FIXED:
            self._skip(_FIXED[vtype])
        elif vtype == _STR:
            self._skip(int(self.num(_U64)))  # type: ignore[call-overload]
        elif vtype == _ARR:
            etype, count = int(self.num(_U32)), int(self.num(_U64))  # type: ignore[call-overload]
            if etype in _FIXED:
                self._skip(_FIXED[etype] * count)
            elif count > self.size:
                raise GGUFError("corrupt array length in the metadata")
            else:
                for _ in range(count):
                    self.skip_value(etype)
        else:
            raise GGUFError(f"corrupt metadata (value type {vtype})")
        if self.fh.tell() > self.size:
            raise GGUFError("metadata runs past the end of the file (truncated?)")


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse the header and tensor index of a GGUF file; GGUFError when it is not a complete GGUF."""
    p = Path(path)
    try:
        size = p.stat().st_size
        fh = open(p, "rb")
    except OSError as exc:
        raise GGUFError(f"cannot open {p}: {exc.strerror}") from None
    with fh:
        r = _Reader(fh, size)
        if r.fh.read(4) != MAGIC:
            raise GGUFError(f"{p} is not a GGUF file (bad magic)")
        version = int(r.num(_U32))  # type: ignore[call-overload]
        if version not in (2, 3):
            raise GGUFError(f"{p}: GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = int(r.num(_U64)), int(r.num(_U64))  # type: ignore[call-overload]
        if n_tensors > 1_000_000 or n_kv > 1_000_000:
            raise GGUFError(f"{p}: corrupt header (counts {n_tensors}, {n_kv})")
        out = GGUFFile(p, version)
        for _ in range(n_kv):
            key = r.string()
            vtype = int(r.num(_U32))  # type: ignore[call-overload]
            if key in _KEEP and vtype in _FIXED:
                out.metadata[key] = r.num(vtype)
            elif key in _KEEP and vtype == _STR:
                out.metadata[key] = r.string()
            else:
                r.skip_value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = r.string()
            ndim = int(r.num(_U32))  # type: ignore[call-overload]
            if ndim > 8:
                raise GGUFError(f"{p}: corrupt tensor entry {name!r}")
            shape = tuple(int(r.num(_U64)) for _ in range(ndim))  # type: ignore[call-overload]
            qtype, rel = int(r.num(_U32)), int(r.num(_U64))  # type: ignore[call-overload]
            infos.append((name, shape, qtype, rel))
        align = int(out.metadata.get("general.alignment", 32))  # type: ignore[call-overload]
        if align <= 0 or align > 1 << 20:
            raise GGUFError(f"{p}: corrupt header (general.alignment {align})")
        start = -(-fh.tell() // align) * align
    for name, shape, qtype, rel in infos:
        nbytes = _tensor_nbytes(shape, qtype)
        info = TensorInfo(name, shape, qtype, start + rel, nbytes)
        if nbytes <= 0 or any(d <= 0 for d in shape):
            raise GGUFError(f"{p}: corrupt tensor entry {name!r} (shape {list(shape)})")
        if info.offset + nbytes > size:
            raise GGUFError(f"{p} is truncated: tensor {name} ends at byte {info.offset + nbytes}, the file has {size}")
        out.tensors[name] = info
    return out
