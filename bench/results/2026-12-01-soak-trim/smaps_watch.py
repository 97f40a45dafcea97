"""Sample a soaked server's memory maps from outside: python smaps_watch.py SOAK_PID OUT.jsonl PERIOD_S.

Finds the `dspark_lsp.lsp` child of the soak process, then every PERIOD_S appends one JSON line: its
smaps_rollup (kB), its threads, and every anonymous map over 4 MB (address range, permissions, Size / Rss /
Anonymous in kB). How the maps of README.md were read.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any


def child_server(ppid: int) -> int | None:
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            cmd = open(f"/proc/{d}/cmdline").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == ppid and "dspark_lsp.lsp" in cmd:
            return int(d)
    return None


def smaps(pid: int) -> list[dict[str, Any]]:
    maps: list[dict[str, Any]] = []
    for line in open(f"/proc/{pid}/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split("-"))
            maps.append({"start": a, "end": b, "perms": parts[1], "path": parts[5] if len(parts) > 5 else ""})
        else:
            key, _, value = line.partition(":")
            if key in ("Rss", "Anonymous", "Size"):
                maps[-1][key] = int(value.split()[0])
    return maps


def rollup(pid: int) -> dict[str, int]:
    out = {}
    for row in open(f"/proc/{pid}/smaps_rollup").readlines()[1:]:
        if row.split()[-1] == "kB":
            out[row.split(":")[0]] = int(row.split()[1])
    return out


def main() -> None:
    ppid, out, period = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    pid = None
    while pid is None:
        pid = child_server(ppid)
        time.sleep(1)
    t0 = time.monotonic()
    with open(out, "a") as fh:
        while os.path.exists(f"/proc/{pid}"):
            try:
                m = smaps(pid)
                tasks = os.listdir(f"/proc/{pid}/task")
                threads = sorted(open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in tasks)
                roll = rollup(pid)
            except OSError:
                break
            big = [x for x in m if x.get("Anonymous", 0) > 4096 or (x["path"] == "" and x["end"] - x["start"] > 8 << 20)]
            row = {"t": round(time.monotonic() - t0, 1), "pid": pid, "rollup": roll, "threads": threads,
                   "big": big, "nmaps": len(m)}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            time.sleep(period)


if __name__ == "__main__":
    main()
