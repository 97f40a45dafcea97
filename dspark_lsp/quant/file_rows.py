"""An embedding table's rows read from its GGUF file when they are looked up, instead of held in memory.

Why: the default target's token embedding (151,936 × 896, Q5_0 in its Q4_K_M file) is 146 MB in the
kernel's layout (one byte per code plus fp32 scales), yet a forward reads a handful of its rows. Its file
is at hand (the quantized path is loaded from it), so a lookup reads the rows' blocks with ``pread`` (the
file's pages stay in the page cache, not in the process's resident memory), converts just those rows with
the same ``blocks.parse``/``blocks.pack`` as the whole-table load, and expands them with the kernel's
``qrows``: each row's values depend on that row's blocks alone, so they are the in-memory table's values
bit for bit (tested for every supported type).

Converting rows in numpy costs ~0.1-1 ms a call, ten times the in-memory lookup, and the draft embeds a
token per step; so the fp32 rows of the last ``cache_rows`` distinct tokens are kept (4,096 rows of the
0.5B are 14.7 MB): a decode or draft step mostly embeds tokens seen moments before.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dspark_lsp.quant import blocks
from dspark_lsp.quant.gguf_file import GGUFError, TensorInfo

CACHE_ROWS = 4096


class FileRows:
    """The fp32 rows of one quantized [n, k] matrix stored in a GGUF file, looked up by row id.

    The file stays open (a descriptor, so a file renamed or deleted meanwhile is still the one read);
    a read that comes back short (the file was cut in place) raises GGUFError.
    """

    def __init__(self, path: Path, info: TensorInfo, cache_rows: int = CACHE_ROWS) -> None:
        if info.qtype not in blocks.BLOCK:
            raise ValueError(f"tensor {info.name}: type {info.qtype} has no quantized blocks to read rows from")
        size, per = blocks.BLOCK[info.qtype]
        self.n, self.k = info.rows_cols
        if self.k % per:
            raise ValueError(f"tensor {info.name}: row length {self.k} is not a multiple of its block size {per}")
        self.row_bytes = self.k // per * size
        if self.row_bytes * self.n != info.nbytes:
            raise ValueError(f"tensor {info.name}: {info.nbytes} bytes do not hold [{self.n}, {self.k}]")
        self.path, self.info, self.cache_rows = Path(path), info, cache_rows
        self._open()

    def _open(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise GGUFError(f"cannot open {self.path}: {exc.strerror}") from None
        weakref.finalize(self, os.close, self._fd)
        self._lock = threading.Lock()
        self._slot: OrderedDict[int, int] = OrderedDict()  # row id -> row of _table, least recent first
        self._table: torch.Tensor | None = None  # [cache_rows, k] fp32, allocated on first use

    # A copy (deepcopy, pickle) opens the file again rather than sharing (and later closing) a descriptor.
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "info": self.info, "cache_rows": self.cache_rows, "n": self.n, "k": self.k,
                "row_bytes": self.row_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open()

    def expand(self, rows: list[int]) -> torch.Tensor:
        """fp32 values [len(rows), k] of ``rows`` (valid ids), read from the file; nothing is cached."""
        raw = np.empty((len(rows), self.row_bytes), dtype=np.uint8)
        for i, r in enumerate(rows):
            got = os.preadv(self._fd, [raw[i]], self.info.offset + r * self.row_bytes)
            if got != self.row_bytes:
                raise GGUFError(f"{self.path}: tensor {self.info.name} is cut short (row {r}): the file changed")
        p = blocks.pack(blocks.parse(raw, self.info.qtype, len(rows), self.k), len(rows), self.k, self.info.qtype)
        local = torch.arange(len(rows), dtype=torch.long)
        codes = torch.from_numpy(p.codes.reshape(-1))
        scale = torch.from_numpy(p.scale.reshape(len(rows), -1))
        off = torch.from_numpy(p.off.reshape(-1))
        out: torch.Tensor = torch.ops.dspark_q.qrows(local, p.kind, codes, scale, off, p.shift, self.k)
        return out

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 rows [*ids.shape, k] for integer ids (IndexError for an id outside [0, n))."""
        flat = ids.reshape(-1).tolist()
        wanted = dict.fromkeys(flat)  # distinct ids in first-seen order
        for r in wanted:
            if not 0 <= r < self.n:
                raise IndexError(f"row id {r} is out of range for a table of {self.n} rows")
        with self._lock:
            if len(wanted) > self.cache_rows:  # more distinct ids than the cache holds: no caching
                order = sorted(wanted)
                where = {r: i for i, r in enumerate(order)}
                values = self.expand(order)
                return values[torch.tensor([where[r] for r in flat], dtype=torch.long)].reshape(*ids.shape, self.k)
            if self._table is None:
                # A normal tensor whatever mode the first lookup runs in: one made under inference mode
                # could never be written outside it, and the engine (inference mode) and transformers'
                # generate (no_grad: the bench's hf_* methods) look rows up in the same table (issue 33).
                with torch.inference_mode(False):
                    self._table = torch.empty(self.cache_rows, self.k, dtype=torch.float32)
            slot = self._slot
            missing = []
            for r in wanted:
                if r in slot:
                    slot.move_to_end(r)  # a hit: the eviction below takes other rows first
                else:
                    missing.append(r)
            if missing:
                missing.sort()
                values = self.expand(missing)
                free = self.cache_rows - len(slot)
                for i, r in enumerate(missing):
                    if free > 0:
                        place = self.cache_rows - free
                        free -= 1
                    else:  # the least recent row not asked for now (asked-for rows were moved to the end)
                        _old, place = slot.popitem(last=False)
                    self._table[place] = values[i]
                    slot[r] = place
            index = torch.tensor([slot[r] for r in flat], dtype=torch.long)
            return self._table.index_select(0, index).reshape(*ids.shape, self.k)
