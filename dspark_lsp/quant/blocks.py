"""GGUF quantized blocks -> the kernel's layout (``qkernel.cpp``), keeping the file's exact values.

Every supported type is read as integer codes plus a scale (and, for the affine types, an offset) per
group of 32 (16 for Q6_K), with the same bit operations and the same fp32 products as the ``gguf``
package's reference dequantization, so ``scale * (code - shift) + offset`` in fp32 is that reference value
bit for bit (checked by the tests for every type). The codes are then stored compactly: low nibbles two
per byte, plus one or two high-bit planes (5- and 6-bit codes) or plain int8 (Q8_0).

numpy only: no torch import here, so the parsing is testable and cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QK = 32
QK_K = 256

# GGML type ids (ggml.h) of what we map; anything else is "unsupported" and loads dequantized.
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
TYPE_NAMES = {F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0",
              Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", BF16: "BF16"}
# bytes per block, values per block
BLOCK = {Q4_0: (18, QK), Q4_1: (20, QK), Q5_0: (22, QK), Q5_1: (24, QK), Q8_0: (34, QK),
         Q4_K: (144, QK_K), Q5_K: (176, QK_K), Q6_K: (210, QK_K)}
QUANTIZED = frozenset(BLOCK)


@dataclass
class Codes:
    """One matrix [n, k] as integer codes and per-group scales (what the parsers produce)."""

    codes: np.ndarray  # uint8 [n, k / 32, 32] (or int8 for Q8_0)
    scale: np.ndarray  # float32 [n, k / 32] or [n, k / 16]
    off: np.ndarray | None  # float32 [n, k / 32] or None
    shift: int
    bits: int  # 4, 5, 6 or 8


@dataclass
class Packed:
    """The kernel's layout of one matrix (see qkernel.cpp); numpy arrays, turned into tensors later.

    kind 4: ``codes`` uint8 [n, g, 16], two 4-bit codes per byte (element j low, element j + 16 high);
    kind 8: ``codes`` int8 [n, g, 32], one code per weight, already minus the zero point (``shift`` 0);
    kinds 14 and 18: the same codes, scales and offsets in panels of 8 rows (:func:`interleave`).
    """

    kind: int
    codes: np.ndarray
    scale: np.ndarray  # float32 [n, g] or [n, 2g]
    off: np.ndarray  # float32 [n, g], or empty when the type has no offsets
    shift: int
    n: int
    k: int
    source_type: int

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes + self.off.nbytes

    def values(self) -> np.ndarray:
        """fp32 values [n, k], the kernel's arithmetic in numpy (the reference for tests)."""
        if self.kind in PANEL_KINDS:
            return deinterleave(self).values()
        g = self.k // QK
        if self.kind == 8:
            q = self.codes.reshape(self.n, g, QK).astype(np.int32)
        else:
            c = self.codes.reshape(self.n, g, 16)
            q = np.concatenate([c & 15, c >> 4], axis=-1).astype(np.int32)
        v = (q - self.shift).astype(np.float32)
        per = self.scale.shape[1] // g
        s = np.repeat(self.scale.reshape(self.n, g, per), QK // per, axis=2)
        out = s * v
        if self.off.size:
            out = out + self.off.reshape(self.n, g, 1)
        return out.reshape(self.n, self.k)


class UnsupportedType(ValueError):
    """A tensor type the kernel does not hold (it is loaded dequantized instead)."""


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)[..., 0]


def _scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of a Q4_K/Q5_K super-block (12 bytes), as in ggml's get_scale_min_k4."""
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def parse(raw: np.ndarray, qtype: int, n: int, k: int) -> Codes:
    """Codes and scales of a matrix stored as ``qtype`` blocks; ``raw`` is its bytes (any shape, uint8)."""
    if qtype not in BLOCK:
        raise UnsupportedType(f"tensor type {TYPE_NAMES.get(qtype, qtype)} is not supported by the kernel")
    size, per = BLOCK[qtype]
    if k % per:
        raise ValueError(f"row length {k} is not a multiple of the {TYPE_NAMES[qtype]} block size {per}")
    flat = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    nb = n * k // per
    if flat.size != nb * size:
        raise ValueError(f"{TYPE_NAMES[qtype]} tensor [{n}, {k}] should hold {nb * size} bytes, not {flat.size}")
    b: np.ndarray = flat.reshape(nb, size)
    g = k // QK
    if qtype in (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0):
        d = _f16(b[:, 0:2])
        if qtype == Q8_0:
            return Codes(b[:, 2:].view(np.int8).reshape(n, g, QK), d.reshape(n, g), None, 0, 8)
        affine = qtype in (Q4_1, Q5_1)
        m = _f16(b[:, 2:4]) if affine else None
        at = 4 if affine else 2
        qh = None
        if qtype in (Q5_0, Q5_1):
            qh = np.ascontiguousarray(b[:, at : at + 4]).view("<u4")[:, 0]
            at += 4
        qs = b[:, at : at + 16]
        codes = np.concatenate([qs & 15, qs >> 4], axis=-1)
        if qh is not None:
            codes = codes | (((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4)
        shift = 0 if affine else (16 if qh is not None else 8)
        off = None if m is None else m.reshape(n, g)
        return Codes(codes.reshape(n, g, QK), d.reshape(n, g), off, shift, 5 if qh is not None else 4)
    if qtype in (Q4_K, Q5_K):
        d = _f16(b[:, 0:2])[:, None]
        dmin = _f16(b[:, 2:4])[:, None]
        sc, mn = _scale_min_k4(b[:, 4:16])
        scale = d * sc.astype(np.float32)  # [nb, 8], the reference's exact fp32 products
        off = -(dmin * mn.astype(np.float32))
        if qtype == Q4_K:
            qs, qh = b[:, 16:144], None
        else:
            qh, qs = b[:, 16:48], b[:, 48:176]
        ql = (qs.reshape(nb, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15
        codes = ql.reshape(nb, 8, 32)
        if qh is not None:
            hb = (qh.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
            codes = codes | (hb << 4)
        return Codes(codes.reshape(n, g, QK), scale.reshape(n, g), off.reshape(n, g), 0, 4 if qh is None else 5)
    # Q6_K
    ql, qh6 = b[:, 0:128], b[:, 128:192]
    scales = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(b[:, 208:210])[:, None]
    lo = ((ql.reshape(nb, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15).reshape(nb, 8, 32)
    hi = ((qh6.reshape(nb, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3)
    codes = lo | (hi.reshape(nb, 8, 32) << 4)
    return Codes(codes.reshape(n, g, QK), (d * scales).reshape(n, 2 * g), None, 32, 6)


def pack(c: Codes, n: int, k: int, source_type: int) -> Packed:
    off = np.ascontiguousarray(c.off, np.float32) if c.off is not None else np.zeros(0, np.float32)
    scale = np.ascontiguousarray(c.scale, np.float32)
    if c.bits == 4:
        codes = c.codes.astype(np.uint8)
        nib = np.ascontiguousarray((codes[..., :16] & 15) | ((codes[..., 16:] & 15) << 4))
        return Packed(4, nib, scale, off, c.shift, n, k, source_type)
    # 5, 6 and 8 bits: one signed byte per weight holding code - zero point (range -32..31 or -128..127).
    wide = np.ascontiguousarray((c.codes.astype(np.int16) - c.shift).astype(np.int8))
    return Packed(8, wide, scale, off, 0, n, k, source_type)


# Rows parsed per step: bounds the temporaries (the 151,936-row embedding would need ~1 GB at once).
_CHUNK_ROWS = 8192


def pack_tensor(raw: np.ndarray, qtype: int, n: int, k: int) -> Packed:
    """``pack(parse(...))`` of a whole matrix, done in row chunks so peak memory stays near the result's."""
    size, per = BLOCK.get(qtype, (0, 1))
    if qtype not in BLOCK or n <= _CHUNK_ROWS:
        return pack(parse(raw, qtype, n, k), n, k, qtype)
    flat = np.asarray(raw, dtype=np.uint8).reshape(-1)
    row_bytes = k // per * size
    if flat.size != n * row_bytes:
        raise ValueError(f"{TYPE_NAMES[qtype]} tensor [{n}, {k}] should hold {n * row_bytes} bytes, not {flat.size}")
    out: Packed | None = None
    for r0 in range(0, n, _CHUNK_ROWS):
        r1 = min(n, r0 + _CHUNK_ROWS)
        piece = pack(parse(flat[r0 * row_bytes : r1 * row_bytes], qtype, r1 - r0, k), r1 - r0, k, qtype)
        if out is None:  # the whole result allocated once, filled chunk by chunk (no second copy)
            out = Packed(piece.kind, np.empty((n, *piece.codes.shape[1:]), piece.codes.dtype),
                         np.empty((n, piece.scale.shape[1]), np.float32),
                         np.empty((n, *piece.off.shape[1:]), np.float32) if piece.off.size else piece.off,
                         piece.shift, n, k, qtype)
        out.codes[r0:r1] = piece.codes
        out.scale[r0:r1] = piece.scale
        if piece.off.size:
            out.off[r0:r1] = piece.off
    assert out is not None
    return out


def concat_rows(parts: list[Packed]) -> Packed | None:
    """One matrix holding ``parts`` stacked by rows (same input, several projections: one kernel call),
    or None when their layouts differ. Rows are independent dot products, so each part's outputs are the
    same bits as when it runs alone."""
    first = parts[0]
    same = all(
        p.kind == first.kind and p.shift == first.shift and p.k == first.k and p.scale.shape[1] == first.scale.shape[1]
        and bool(p.off.size) == bool(first.off.size)
        for p in parts
    )
    if not same:
        return None
    off = np.concatenate([p.off.reshape(p.n, -1) for p in parts]) if first.off.size else np.zeros(0, np.float32)
    return Packed(first.kind, np.concatenate([p.codes.reshape(p.n, -1) for p in parts]),
                  np.concatenate([p.scale for p in parts]), off, first.shift, sum(p.n for p in parts), first.k,
                  first.source_type)


# Panels of 8 weight rows (qkernel.cpp, "Panel layout"): one 256-bit register then holds the same two
# inputs of 8 rows, so a decode or verify product sums each row's group in its own lane and pays the
# integer-to-fp32 step once per group for 8 rows instead of once per row (the few-row products' main
# cost beside the multiplies). Same codes, scales and offsets, reordered once at load time.
PANEL = 8
PANEL_KINDS = frozenset({14, 18})


def interleave(p: Packed) -> Packed:
    """``p`` (kind 4 or 8, ``p.n`` a multiple of 8) in the panel layout (kind 14 or 18)."""
    if p.kind not in (4, 8) or p.n % PANEL:
        raise ValueError(f"cannot interleave kind {p.kind} with {p.n} rows (needs kind 4 or 8, rows % 8 == 0)")
    g = p.k // QK
    np_ = p.n // PANEL
    if p.kind == 8:
        # [P, 8 rows, g, 16 pairs, 2] -> [P, g, 16 pairs, 8 rows, 2]
        c = p.codes.reshape(np_, PANEL, g, 16, 2).transpose(0, 2, 3, 1, 4)
    else:
        # the 32 codes of a group, then quads: [P, 8, g, 8 quads, 2 (lo/hi pair), 2 (e)]
        nib = p.codes.reshape(p.n, g, 16)
        full = np.concatenate([nib & 15, nib >> 4], axis=-1).reshape(np_, PANEL, g, 8, 2, 2)
        byte = full[..., 0, :] | (full[..., 1, :] << 4)  # [P, 8, g, 8 quads, 2 e]
        c = byte.transpose(0, 2, 3, 1, 4)  # [P, g, quad, row, e]
    per = p.scale.shape[1] // g  # 1, or 2 for Q6_K
    scale = p.scale.reshape(np_, PANEL, g * per).transpose(0, 2, 1)
    off = p.off.reshape(np_, PANEL, g).transpose(0, 2, 1).reshape(p.n, g) if p.off.size else p.off
    return Packed(p.kind + 10, np.ascontiguousarray(c).reshape(p.codes.shape),
                  np.ascontiguousarray(scale).reshape(p.n, g * per), np.ascontiguousarray(off), p.shift, p.n, p.k,
                  p.source_type)


def deinterleave(p: Packed) -> Packed:
    """The inverse of :func:`interleave` (row-major kind 4 or 8)."""
    g = p.k // QK
    np_ = p.n // PANEL
    if p.kind == 18:
        c = p.codes.reshape(np_, g, 16, PANEL, 2).transpose(0, 3, 1, 2, 4)
    else:
        byte = p.codes.reshape(np_, g, 8, PANEL, 2).transpose(0, 3, 1, 2, 4)  # [P, row, g, quad, e]
        full = np.stack([byte & 15, byte >> 4], axis=-2).reshape(p.n, g, 32)  # quad: 4q + e, 4q + 2 + e
        c = (full[..., :16] | (full[..., 16:] << 4)).astype(np.uint8)
    per = p.scale.shape[1] // g
    scale = p.scale.reshape(np_, g * per, PANEL).transpose(0, 2, 1).reshape(p.n, g * per)
    off = p.off.reshape(np_, g, PANEL).transpose(0, 2, 1).reshape(p.n, g) if p.off.size else p.off
    return Packed(p.kind - 10, np.ascontiguousarray(c).reshape(p.codes.shape), np.ascontiguousarray(scale),
                  np.ascontiguousarray(off), p.shift, p.n, p.k, p.source_type)
