"""GGUF quantized blocks -> the kernel's layout (``qkernel.cpp``), keeping the file's exact values.

Every supported type is read as integer codes plus a scale (and, for the affine types, an offset) per
group of 32 (16 for Q6_K), with the same bit operations and the same fp32 products as the ``gguf``
package's reference dequantization, so ``scale * (code - shift) + offset`` in fp32 is that reference value
bit for bit (checked by the tests for every type). The codes are then stored compactly: low nibbles two
per byte, plus one or two high-bit planes (5- and 6-bit codes) or plain int8 (Q8_0).

The K-quants (Q4_K, Q5_K, Q6_K) also keep their integer sub-block scales and per-256 factors
(:class:`SubScales`), from which :func:`interleave` can build the compact panels: the kernel then forms
the same fp32 products ``d * sc`` (and ``dmin * m``) itself instead of reading an fp32 scale (and offset)
per group, ~4.75 instead of 6 bits a Q4_K weight.

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
class SubScales:
    """A K-quant matrix's scales as the file holds them: integer codes per unit (32 weights, or 16 for
    Q6_K) and fp32 factors per super-block of 256 weights. ``scale = d * sc`` and ``offset = -(dmin * mn)``,
    as fp32 products, are :class:`Codes`' scale and offset bit for bit."""

    d: np.ndarray  # float32 [n, k / 256]
    sc: np.ndarray  # int8 [n, units]: 6-bit scale codes per 32 (Q4_K, Q5_K) or int8 scales per 16 (Q6_K)
    dmin: np.ndarray | None  # float32 [n, k / 256] (types with offsets) or None
    mn: np.ndarray | None  # int8 [n, k / 32]: 6-bit min codes, or None


@dataclass
class Codes:
    """One matrix [n, k] as integer codes and per-group scales (what the parsers produce)."""

    codes: np.ndarray  # uint8 [n, k / 32, 32] (or int8 for Q8_0)
    scale: np.ndarray  # float32 [n, k / 32] or [n, k / 16]
    off: np.ndarray | None  # float32 [n, k / 32] or None
    shift: int
    bits: int  # 4, 5, 6 or 8
    sub: SubScales | None = None  # K-quants: the integer scales the fp32 ones were made from


@dataclass
class Packed:
    """The kernel's layout of one matrix (see qkernel.cpp); numpy arrays, turned into tensors later.

    kind 4: ``codes`` uint8 [n, g, 16], two 4-bit codes per byte (element j low, element j + 16 high);
    kind 8: ``codes`` int8 [n, g, 32], one code per weight, already minus the zero point (``shift`` 0);
    kinds 14 and 18: the same codes, scales and offsets in panels of 8 rows (:func:`interleave`); compact
    panels (``compact``: K-quants) hold the integer sub-block scales after each panel group's codes and
    the per-256 factors d and dmin as ``scale`` and ``off`` (qkernel.cpp, "Super-block scales");
    kind 16: compact Q6_K panels whose codes keep 6 bits (a 4-bit plane and a 2-bit plane, qkernel.cpp,
    "6-bit panels"), ``shift`` 32.
    """

    kind: int
    codes: np.ndarray
    scale: np.ndarray  # float32 [n, g] or [n, 2g]
    off: np.ndarray  # float32 [n, g], or empty when the type has no offsets
    shift: int
    n: int
    k: int
    source_type: int
    sub: SubScales | None = None  # row-major K-quants: what a compact interleave needs

    @property
    def nbytes(self) -> int:
        """Bytes the kernel reads for one product: codes, scales, offsets (not ``sub``, a load-time aid)."""
        return self.codes.nbytes + self.scale.nbytes + self.off.nbytes

    @property
    def compact(self) -> bool:
        """Panels with super-block scales: one fp32 factor per 256 weights of a row instead of per group
        (the kernel tells the two forms apart by the same width)."""
        g = self.k // QK
        return self.kind in PANEL_KINDS and g % 8 == 0 and self.scale.shape[1] * 8 == g

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
        sub = SubScales(d.reshape(n, -1), sc.astype(np.int8).reshape(n, g), dmin.reshape(n, -1),
                        mn.astype(np.int8).reshape(n, g))
        if qtype == Q4_K:
            qs, qh = b[:, 16:144], None
        else:
            qh, qs = b[:, 16:48], b[:, 48:176]
        ql = (qs.reshape(nb, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15
        codes = ql.reshape(nb, 8, 32)
        if qh is not None:
            hb = (qh.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
            codes = codes | (hb << 4)
        return Codes(codes.reshape(n, g, QK), scale.reshape(n, g), off.reshape(n, g), 0, 4 if qh is None else 5, sub)
    # Q6_K
    ql, qh6 = b[:, 0:128], b[:, 128:192]
    sc6 = b[:, 192:208].view(np.int8)
    scales = sc6.astype(np.float32)
    d = _f16(b[:, 208:210])[:, None]
    lo = ((ql.reshape(nb, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15).reshape(nb, 8, 32)
    hi = ((qh6.reshape(nb, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3)
    codes = lo | (hi.reshape(nb, 8, 32) << 4)
    sub6 = SubScales(d.reshape(n, -1), np.ascontiguousarray(sc6).reshape(n, 2 * g), None, None)
    return Codes(codes.reshape(n, g, QK), (d * scales).reshape(n, 2 * g), None, 32, 6, sub6)


def pack(c: Codes, n: int, k: int, source_type: int) -> Packed:
    off = np.ascontiguousarray(c.off, np.float32) if c.off is not None else np.zeros(0, np.float32)
    scale = np.ascontiguousarray(c.scale, np.float32)
    if c.bits == 4:
        codes = c.codes.astype(np.uint8)
        nib = np.ascontiguousarray((codes[..., :16] & 15) | ((codes[..., 16:] & 15) << 4))
        return Packed(4, nib, scale, off, c.shift, n, k, source_type, c.sub)
    # 5, 6 and 8 bits: one signed byte per weight holding code - zero point (range -32..31 or -128..127).
    wide = np.ascontiguousarray((c.codes.astype(np.int16) - c.shift).astype(np.int8))
    return Packed(8, wide, scale, off, 0, n, k, source_type, c.sub)


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
                         piece.shift, n, k, qtype, _empty_sub(piece.sub, n))
        out.codes[r0:r1] = piece.codes
        out.scale[r0:r1] = piece.scale
        if piece.off.size:
            out.off[r0:r1] = piece.off
        if out.sub is not None and piece.sub is not None:
            _fill_sub(out.sub, piece.sub, r0, r1)
    assert out is not None
    return out


def _empty_sub(like: SubScales | None, n: int) -> SubScales | None:
    if like is None:
        return None
    def rows(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.empty((n, a.shape[1]), a.dtype)
    return SubScales(np.empty((n, like.d.shape[1]), np.float32), np.empty((n, like.sc.shape[1]), np.int8),
                     rows(like.dmin), rows(like.mn))


def _fill_sub(out: SubScales, piece: SubScales, r0: int, r1: int) -> None:
    out.d[r0:r1] = piece.d
    out.sc[r0:r1] = piece.sc
    if out.dmin is not None and piece.dmin is not None and out.mn is not None and piece.mn is not None:
        out.dmin[r0:r1] = piece.dmin
        out.mn[r0:r1] = piece.mn


def _concat_sub(parts: list[Packed]) -> SubScales | None:
    subs = [p.sub for p in parts]
    if any(s is None for s in subs):
        return None
    ss = [s for s in subs if s is not None]
    def cat(name: str) -> np.ndarray | None:
        arrays = [getattr(s, name) for s in ss]
        return None if any(a is None for a in arrays) else np.concatenate(arrays)
    d, sc = cat("d"), cat("sc")
    assert d is not None and sc is not None
    return SubScales(d, sc, cat("dmin"), cat("mn"))


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
    # Panel matrices (compact or not) keep each panel's data contiguous, so stacking whole panels is a
    # flat concatenation, which this is.
    off = np.concatenate([p.off.reshape(p.n, -1) for p in parts]) if first.off.size else np.zeros(0, np.float32)
    return Packed(first.kind, np.concatenate([p.codes.reshape(p.n, -1) for p in parts]),
                  np.concatenate([p.scale for p in parts]), off, first.shift, sum(p.n for p in parts), first.k,
                  first.source_type, _concat_sub(parts))


# Panels of 8 weight rows (qkernel.cpp, "Panel layout"): one 256-bit register then holds the same two
# inputs of 8 rows, so a decode or verify product sums each row's group in its own lane and pays the
# integer-to-fp32 step once per group for 8 rows instead of once per row (the few-row products' main
# cost beside the multiplies). Same codes, scales and offsets, reordered once at load time.
PANEL = 8
PANEL_KINDS = frozenset({14, 16, 18})  # compact panels too (Packed.compact); 16: Q6_K's 6-bit panels
SIX = 16  # compact Q6_K panels with 6-bit codes (interleave's ``six``)


def can_compact(p: Packed) -> bool:
    """Whether ``p`` (row-major) can take the compact panels: a K-quant with its integer scales at hand,
    offsets xor two scales per group (what the kernel's compact products hold), whole super-blocks."""
    if p.sub is None or p.kind not in (4, 8) or p.k % QK_K or p.n % PANEL:
        return False
    two = p.scale.shape[1] == 2 * (p.k // QK)
    return bool(p.off.size) != two and (p.sub.mn is not None) == bool(p.off.size)


def _panel_order(a: np.ndarray, n: int) -> np.ndarray:
    """Per-row values [n, c] -> [n / 8 panels, c, 8 rows] (a panel's rows in the last axis)."""
    return a.reshape(n // PANEL, PANEL, -1).transpose(0, 2, 1)


def _row_order(a: np.ndarray, n: int) -> np.ndarray:
    """The inverse of :func:`_panel_order`, back to [n, c]."""
    return a.reshape(n // PANEL, -1, PANEL).transpose(0, 2, 1).reshape(n, -1)


def interleave(p: Packed, compact: bool = False, six: bool = False) -> Packed:
    """``p`` (kind 4 or 8, ``p.n`` a multiple of 8) in the panel layout (kind 14 or 18); with ``compact``
    (see :func:`can_compact`) with super-block scales (qkernel.cpp, "Super-block scales"); with ``six``
    too (Q6_K only), its codes in 6 bits (kind 16, :func:`pack_six`)."""
    if p.kind not in (4, 8) or p.n % PANEL:
        raise ValueError(f"cannot interleave kind {p.kind} with {p.n} rows (needs kind 4 or 8, rows % 8 == 0)")
    if compact and not can_compact(p):
        raise ValueError(f"{TYPE_NAMES.get(p.source_type, p.source_type)} [{p.n}, {p.k}] cannot take compact panels")
    if six:
        if not (compact and p.source_type == Q6_K):
            raise ValueError("6-bit panels hold compact Q6_K matrices only")
        return pack_six(interleave(p, compact=True))
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
    if compact:
        sub = p.sub
        assert sub is not None
        if sub.mn is not None:  # the group's 8 scale codes, then its 8 min codes
            aux = np.concatenate([_panel_order(sub.sc, p.n), _panel_order(sub.mn, p.n)], axis=-1)
        else:  # Q6_K: the 8 rows' scales of the group's first half, then of its second
            aux = _panel_order(sub.sc, p.n).reshape(np_, g, 2 * PANEL)
        # [P, g, code bytes + 16], filled in place: no temporary copy of the codes (a 150k-row head's
        # codes are ~230 MB)
        code_bytes = 256 if p.kind == 8 else 128
        block = np.empty((np_, g, code_bytes + 2 * PANEL), p.codes.dtype)
        dest = block[..., :code_bytes].reshape(c.shape)  # splits the last axis: a view of block
        assert np.may_share_memory(dest, block)
        np.copyto(dest, c)
        block[..., code_bytes:] = aux.view(p.codes.dtype)
        d = np.ascontiguousarray(_panel_order(sub.d, p.n)).reshape(p.n, -1)
        dmin = np.ascontiguousarray(_panel_order(sub.dmin, p.n)).reshape(p.n, -1) if sub.dmin is not None \
            else np.zeros(0, np.float32)
        return Packed(p.kind + 10, block.reshape(p.n, -1), d, dmin, p.shift, p.n, p.k,
                      p.source_type)
    per = p.scale.shape[1] // g  # 1, or 2 for Q6_K
    scale = p.scale.reshape(np_, PANEL, g * per).transpose(0, 2, 1)
    off = p.off.reshape(np_, PANEL, g).transpose(0, 2, 1).reshape(p.n, g) if p.off.size else p.off
    return Packed(p.kind + 10, np.ascontiguousarray(c).reshape(p.codes.shape),
                  np.ascontiguousarray(scale).reshape(p.n, g * per), np.ascontiguousarray(off), p.shift, p.n, p.k,
                  p.source_type)


def pack_six(p: Packed) -> Packed:
    """Compact Q6_K panels (kind 18) -> kind 16: per panel and group, the codes' low 4 bits in kind 14's
    quad layout (128 bytes), their high 2 bits (64 bytes), then the same 16 bytes of integer scales;
    codes unsigned 0..63 (``shift`` 32). 6.625 bits a weight instead of 8.625 (the file: 6.5625).

    High plane: quads 2j and 2j + 1 share the 16 bytes at 128 + 16j; byte 2i + e of them holds, for row i,
    the high bits of inputs 8j + 4 + e (bits 0-1), 8j + 6 + e (2-3), 8j + e (4-5) and 8j + 2 + e (6-7),
    so that one widening serves two quads (qkernel.cpp, "6-bit panels")."""
    if p.kind != 18 or not p.compact or p.off.size:
        raise ValueError("pack_six takes compact Q6_K panels (kind 18)")
    g = p.k // QK
    np_ = p.n // PANEL
    block = p.codes.reshape(np_, g, 272)
    # [P, g, 16 pairs, 8 rows, 2] -> per row and input: [P, g, 8 rows, 32 inputs], unsigned 0..63
    u = (block[..., :256].view(np.int8).reshape(np_, g, 16, PANEL, 2).transpose(0, 1, 3, 2, 4)
         .astype(np.int16) + 32).astype(np.uint8).reshape(np_, g, PANEL, 8, 2, 2)  # [.., quad, half, e]
    lo, hi = u & 15, u >> 4
    low = (lo[..., 0, :] | (lo[..., 1, :] << 4)).transpose(0, 1, 3, 2, 4)  # [P, g, quad, row, e]
    h = hi.reshape(np_, g, PANEL, 4, 2, 2, 2)  # [P, g, row, j, quad of the pair, half, e]
    high = (h[..., 1, 0, :] | (h[..., 1, 1, :] << 2) | (h[..., 0, 0, :] << 4) | (h[..., 0, 1, :] << 6))
    out = np.empty((np_, g, 208), np.uint8)
    out[..., :128] = low.reshape(np_, g, 128)
    out[..., 128:192] = high.transpose(0, 1, 3, 2, 4).reshape(np_, g, 64)  # [P, g, j, row, e]
    out[..., 192:] = block[..., 256:]
    return Packed(SIX, out.reshape(p.n, -1), p.scale, p.off, 32, p.n, p.k, p.source_type)


def unpack_six(p: Packed) -> Packed:
    """The inverse of :func:`pack_six`: kind 16 -> compact kind 18 panels (codes minus 32 as int8)."""
    g = p.k // QK
    np_ = p.n // PANEL
    block = p.codes.reshape(np_, g, 208)
    low = block[..., :128].reshape(np_, g, 8, PANEL, 2).transpose(0, 1, 3, 2, 4)  # [P, g, row, quad, e]
    lo = np.stack([low & 15, low >> 4], axis=-2)  # [P, g, row, quad, half, e]
    high = block[..., 128:192].reshape(np_, g, 4, PANEL, 2).transpose(0, 1, 3, 2, 4)  # [P, g, row, j, e]
    hi = np.stack([np.stack([(high >> 4) & 3, high >> 6], axis=-2),
                   np.stack([high & 3, (high >> 2) & 3], axis=-2)], axis=-3)  # [P, g, row, j, AB, half, e]
    u = lo.reshape(np_, g, PANEL, 32) | (hi.reshape(np_, g, PANEL, 32) << 4)
    q = (u.astype(np.int16) - 32).astype(np.int8)
    codes = q.reshape(np_, g, PANEL, 16, 2).transpose(0, 1, 3, 2, 4).reshape(np_, g, 256)
    out = np.empty((np_, g, 272), np.int8)
    out[..., :256] = codes
    out[..., 256:] = block[..., 192:].view(np.int8)
    return Packed(18, out.reshape(p.n, -1), p.scale, p.off, 0, p.n, p.k, p.source_type)


HALF_TYPES = frozenset({Q4_0, Q5_0, Q8_0})  # one fp16 scale per group, no offsets, in the file


def can_half(p: Packed) -> bool:
    """Whether ``p``'s scales can be held as fp16 (qkernel.cpp, "fp16 scales"): fp32-scale panels of a
    type whose file stores one fp16 scale per group and no offsets, every scale exactly an fp16 value."""
    if p.kind not in (14, 18) or p.compact or p.off.size or p.source_type not in HALF_TYPES:
        return False
    if p.scale.dtype == np.float16:
        return True
    return p.scale.shape[1] == p.k // QK and bool(np.array_equal(p.scale.astype(np.float16).astype(np.float32),
                                                                 p.scale))


def half_scales(p: Packed) -> Packed:
    """``p`` with its scales as fp16 (the same values: see :func:`can_half`)."""
    if not can_half(p):
        raise ValueError(f"{TYPE_NAMES.get(p.source_type, p.source_type)} kind {p.kind} cannot take fp16 scales")
    return Packed(p.kind, p.codes, np.ascontiguousarray(p.scale, np.float16), p.off, p.shift, p.n, p.k,
                  p.source_type, p.sub)


def _uncompact(p: Packed) -> Packed:
    """Compact panels -> the same panels with fp32 scales (and offsets) per group: the fp32 products
    ``d * sc`` and ``-(dmin * mn)`` that :func:`parse` forms (and the kernel), and the integer scales kept."""
    g = p.k // QK
    np_ = p.n // PANEL
    code_bytes = 256 if p.kind == 18 else 128
    block = p.codes.reshape(np_, g, -1)
    shape = (p.n, g, 16) if p.kind == 14 else (p.n, g, 32)  # the codes' shape in kinds 14 / 18
    codes = np.ascontiguousarray(block[..., :code_bytes]).reshape(shape)
    aux = np.ascontiguousarray(block[..., code_bytes:]).view(np.int8)  # [P, g, 16]
    d = _row_order(p.scale, p.n)  # [n, S]
    affine = bool(p.off.size)
    units = g if affine else 2 * g
    sc = _row_order(aux[..., :PANEL] if affine else aux.reshape(np_, units, PANEL), p.n)  # [n, units]
    scale = np.repeat(d, units // d.shape[1], axis=1) * sc.astype(np.float32)
    if affine:
        dmin = _row_order(p.off, p.n)
        mn = _row_order(aux[..., PANEL:], p.n)
        off = -(np.repeat(dmin, g // dmin.shape[1], axis=1) * mn.astype(np.float32))
        sub = SubScales(d, sc, dmin, mn)
    else:
        off = np.zeros(0, np.float32)
        sub = SubScales(d, sc, None, None)
    # fp32 scales in panel order, as interleave lays them out
    scale_p = np.ascontiguousarray(_panel_order(scale, p.n)).reshape(p.n, -1)
    off_p = np.ascontiguousarray(_panel_order(off, p.n)).reshape(p.n, -1) if affine else off
    return Packed(p.kind, codes, scale_p, off_p, p.shift, p.n, p.k, p.source_type, sub)


def deinterleave(p: Packed) -> Packed:
    """The inverse of :func:`interleave` (row-major kind 4 or 8; from compact panels with ``sub`` set)."""
    sub = None
    if p.kind == SIX:
        p = unpack_six(p)
    if p.compact:
        p = _uncompact(p)
        sub = p.sub
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
    return Packed(p.kind - 10, np.ascontiguousarray(c).reshape(p.codes.shape), np.ascontiguousarray(scale, np.float32),
                  np.ascontiguousarray(off), p.shift, p.n, p.k, p.source_type, sub)
