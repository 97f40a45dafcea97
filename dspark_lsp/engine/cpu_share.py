"""How much CPU other processes take, and how many threads the engine's forwards should use for it.

torch runs our products through OpenMP (libgomp on Linux). Its worker threads spin between parallel
regions before they sleep; spinning long (libgomp's own 300,000 iterations) catches the next region of a
decode at once, and on an idle 2-core host makes the 1.5B's one-token forward about 1.3x faster than a
short spin. But when another process keeps a core busy (the editor, a browser, a build), a spinning worker
holds a core the other thread of the region needs, and every region waits for the scheduler: the decode
ran about half as fast (docs/CPU_THREADS.md has the figures). With one thread there is no worker to spin
and no region to wait on. So the package lets libgomp spin long, and the engine asks, before each piece
of work, how much of the CPU the rest of the machine took over the last second: with about a core taken
on a 2-core host it runs one thread, else all it was given.

Linux only (/proc); elsewhere the thread count stays as configured.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Columns of /proc/stat's "cpu" line that are work: user nice system idle iowait irq softirq steal
# (guest time is already inside user). Idle and iowait are not.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuTimes:
    """One reading: CPU seconds every process used, those this process used, and when."""

    busy_s: float
    own_s: float
    at: float  # time.monotonic()


def busy_seconds(proc_stat: str, ticks_per_s: float, cpus: frozenset[int] | None = None) -> float:
    """CPU seconds spent working since boot, from /proc/stat's text: by the CPUs in ``cpus`` (their
    ``cpuN`` lines), or by all of them (the aggregate line) when None. A container pinned to a few CPUs of
    a big host sees the whole host in the aggregate line: its own CPUs are the ones that matter."""
    total, seen = 0, False
    for line in proc_stat.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        name = fields[0]
        if (cpus is None and name == "cpu") or (cpus is not None and name[3:].isdigit() and int(name[3:]) in cpus):
            values = [int(v) for v in fields[1:]]
            total += sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
            seen = True
    if not seen:
        raise ValueError("no matching 'cpu' line in /proc/stat")
    return total / ticks_per_s


def own_seconds(self_stat: str, ticks_per_s: float) -> float:
    """CPU seconds (user + system, all threads) this process used, from /proc/self/stat's text."""
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    rest = self_stat[self_stat.rindex(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15 of the whole line
    return (utime + stime) / ticks_per_s


def read_cpu_times(cpus: frozenset[int] | None = None) -> CpuTimes | None:
    """Now's reading (busy time of ``cpus``, default all), or None where /proc cannot be read (not Linux)."""
    try:
        ticks = float(os.sysconf("SC_CLK_TCK"))
        with open("/proc/stat", encoding="ascii") as fh:
            busy = busy_seconds(fh.read(), ticks, cpus)
        with open("/proc/self/stat", encoding="ascii") as fh:
            own = own_seconds(fh.read(), ticks)
    except (OSError, ValueError, IndexError):
        return None
    return CpuTimes(busy, own, time.monotonic())


def others_cores(before: CpuTimes, after: CpuTimes) -> float:
    """Cores' worth of CPU the other processes used between two readings (0 when no time passed)."""
    wall = after.at - before.at
    if wall <= 0:
        return 0.0
    theirs = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, theirs / wall)


def usable_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on (its affinity mask), None where the OS has no such call."""
    affinity = getattr(os, "sched_getaffinity", None)
    return frozenset(affinity(0)) if affinity is not None else None


def usable_cores() -> int:
    """How many CPUs this process may run on."""
    cpus = usable_cpus()
    return len(cpus) if cpus is not None else (os.cpu_count() or 1)


def threads_for(others: float, cores: int, most: int) -> int:
    """The threads to run with when other processes take ``others`` cores of ``cores``: one per core left
    free, a core counting as free when less than half of it is taken, never more than ``most`` nor fewer
    than one."""
    free = int(cores - others + 0.5)
    return max(1, min(most, free))


@dataclass
class ThreadPolicy:
    """``most``: the threads to use on an idle machine; ``adaptive``: drop below it when others need the
    cores; ``window_s``: how far back the others' use is averaged; ``period_s``: how often it is read."""

    most: int
    adaptive: bool = True
    window_s: float = 1.0
    period_s: float = 0.25


class CpuWatch:
    """Reads the CPU times every ``period_s`` in a daemon thread and answers the threads to use now
    (``threads()``): cheap to ask before every request or prefill slice. ``reader`` and ``cores`` are
    there for tests."""

    def __init__(self, policy: ThreadPolicy, *, cores: int | None = None,
                 reader: Callable[[], CpuTimes | None] | None = None) -> None:
        self.policy = policy
        self.cores = cores or usable_cores()
        # The CPUs this process may run on, looked up once: only their use competes with ours.
        cpus = usable_cpus()
        self._reader = reader or (lambda: read_cpu_times(cpus))
        keep = max(2, int(policy.window_s / policy.period_s) + 2)
        self._samples: deque[CpuTimes] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CpuWatch:
        if self._thread is None and self.policy.adaptive and self.sample() is not None:
            self._thread = threading.Thread(target=self._run, name="dspark-cpu-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.policy.period_s):
            self.sample()

    def sample(self) -> CpuTimes | None:
        now = self._reader()
        if now is not None:
            with self._lock:
                self._samples.append(now)
        return now

    def others(self) -> float | None:
        """Cores the other processes used over about the last window (None: fewer than two readings)."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            last = self._samples[-1]
            # The oldest reading within the window; the one before the last where none but it is.
            first = next(s for s in self._samples if last.at - s.at <= self.policy.window_s + 1e-9)
            if first is last:
                first = self._samples[-2]
        return others_cores(first, last)

    def threads(self) -> int:
        if not self.policy.adaptive:
            return self.policy.most
        others = self.others()
        return self.policy.most if others is None else threads_for(others, self.cores, self.policy.most)
