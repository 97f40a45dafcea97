"""The engine's thread count follows what the other processes take of the CPU (engine/cpu_share.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dspark_lsp.engine.cpu_share import (
    CpuTimes,
    CpuWatch,
    ThreadPolicy,
    busy_seconds,
    others_cores,
    own_seconds,
    read_cpu_times,
    threads_for,
)

PROC_STAT = """cpu  1000 50 300 9000 40 10 20 30 0 0
cpu0 500 25 150 4500 20 5 10 15 0 0
cpu1 300 5 100 4000 10 5 5 10 0 0
cpu12 200 20 50 500 10 0 5 5 0 0
intr 12345
"""
# A command name with spaces and a parenthesis, as a process may call itself.
SELF_STAT = ("4242 (py (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 "
             "250 75 0 0 20 0 3 0 1000 1000000 500 18446744073709551615")


def test_busy_seconds_counts_work_columns_only() -> None:
    # user + nice + system + irq + softirq + steal; idle and iowait are not work.
    assert busy_seconds(PROC_STAT, 100.0) == pytest.approx((1000 + 50 + 300 + 10 + 20 + 30) / 100)


def test_busy_seconds_of_the_cpus_this_process_may_use() -> None:
    """Pinned to CPUs 1 and 12 of a bigger host (a container's cpuset), only their lines count: the
    aggregate line holds the whole host's work, which does not compete with ours."""
    cpu1, cpu12 = 300 + 5 + 100 + 5 + 5 + 10, 200 + 20 + 50 + 0 + 5 + 5
    assert busy_seconds(PROC_STAT, 100.0, frozenset({1, 12})) == pytest.approx((cpu1 + cpu12) / 100)
    with pytest.raises(ValueError):
        busy_seconds(PROC_STAT, 100.0, frozenset({7}))


def test_busy_seconds_rejects_text_without_the_cpu_line() -> None:
    with pytest.raises(ValueError):
        busy_seconds("cpu0 1 2 3 4\n", 100.0)


def test_own_seconds_reads_utime_and_stime_past_an_odd_command_name() -> None:
    assert own_seconds(SELF_STAT, 100.0) == pytest.approx((250 + 75) / 100)


def test_others_cores_subtracts_this_process() -> None:
    a = CpuTimes(busy_s=10.0, own_s=4.0, at=100.0)
    b = CpuTimes(busy_s=12.5, own_s=5.0, at=102.0)  # 2.5 s of work in 2 s, 1 s of it ours
    assert others_cores(a, b) == pytest.approx(0.75)
    assert others_cores(a, a) == 0.0
    # Counters read a tick apart can make ours look larger than the total: never below zero.
    assert others_cores(a, CpuTimes(10.0, 4.5, 101.0)) == 0.0


@pytest.mark.parametrize(("others", "cores", "most", "want"), [
    (0.0, 2, 2, 2),   # idle host: all configured threads
    (0.3, 2, 2, 2),   # a little background work leaves both cores usable
    (0.6, 2, 2, 1),   # more than half a core taken: one thread
    (1.0, 2, 2, 1),   # a busy core (the measured case)
    (2.0, 2, 2, 1),   # never below one
    (0.0, 8, 4, 4),   # never above what was configured
    (5.2, 8, 4, 3),
])
def test_threads_for(others: float, cores: int, most: int, want: int) -> None:
    assert threads_for(others, cores, most) == want


class FakeClock:
    """Readings scripted as (others' cores, our cores) per period."""

    def __init__(self) -> None:
        self.t = 0.0
        self.busy = 0.0
        self.own = 0.0

    def advance(self, seconds: float, others: float, ours: float = 0.0) -> None:
        self.t += seconds
        self.busy += (others + ours) * seconds
        self.own += ours * seconds

    def read(self) -> CpuTimes:
        return CpuTimes(self.busy, self.own, self.t)


def test_watch_drops_to_one_thread_while_a_core_is_busy_and_comes_back() -> None:
    clock = FakeClock()
    watch = CpuWatch(ThreadPolicy(most=2, window_s=1.0, period_s=0.25), cores=2, reader=clock.read)
    assert watch.threads() == 2  # no readings yet: as configured
    watch.sample()
    for _ in range(4):  # a second of another process at one core, our decode at one and a half
        clock.advance(0.25, others=1.0, ours=1.5)
        watch.sample()
    assert watch.others() == pytest.approx(1.0)
    assert watch.threads() == 1
    for _ in range(4):  # the other process stops
        clock.advance(0.25, others=0.0, ours=1.0)
        watch.sample()
    assert watch.threads() == 2


def test_watch_averages_over_its_window_only() -> None:
    clock = FakeClock()
    watch = CpuWatch(ThreadPolicy(most=2, window_s=1.0, period_s=0.25), cores=2, reader=clock.read)
    watch.sample()
    for _ in range(20):  # five busy seconds long ago
        clock.advance(0.25, others=1.0)
        watch.sample()
    for _ in range(4):  # then one quiet second
        clock.advance(0.25, others=0.0)
        watch.sample()
    assert watch.others() == pytest.approx(0.0)
    assert watch.threads() == 2


def test_fixed_policy_ignores_the_load() -> None:
    clock = FakeClock()
    watch = CpuWatch(ThreadPolicy(most=2, adaptive=False), cores=2, reader=clock.read)
    watch.sample()
    clock.advance(1.0, others=2.0)
    watch.sample()
    assert watch.threads() == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_watch_sees_a_real_busy_process() -> None:
    """On the real /proc: a busy-looping child shows up as about a core of others' use."""
    watch = CpuWatch(ThreadPolicy(most=2, window_s=1.0, period_s=0.1), cores=2)
    assert read_cpu_times() is not None
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.5)  # the interpreter's start-up is not the loop
        watch.start()
        time.sleep(1.3)
        seen = watch.others()
    finally:
        child.kill()
        child.wait()
        watch.stop()
    assert seen is not None and seen > 0.6, seen


def test_cost_plans_stand_in_with_the_nearest_count_until_one_is_measured() -> None:
    from dspark_lsp.engine.cost_plans import CostPlans
    from dspark_lsp.engine.costs import ForwardPlan

    two, four = ForwardPlan(cost_ms={1: 30.0, 4: 50.0}), ForwardPlan(cost_ms={1: 20.0, 4: 30.0})
    plans = CostPlans({2: two, 4: four})
    assert plans.for_threads(2) is two and not plans.missing(2)
    assert plans.for_threads(1) is two and plans.for_threads(3) is two  # ties go to the smaller count
    assert plans.missing(1) and plans.missing(3)
    assert not plans.fill(model=None, threads=2)  # it has one: nothing measured (the model is not touched)
    fixed = CostPlans({2: two}, measure=False)  # a stored profile: nothing to measure
    assert not fixed.missing(1) and not fixed.fill(model=None, threads=1)


def test_usable_cores_without_an_affinity_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS and Windows have no os.sched_getaffinity: the watch must still load there."""
    import os

    from dspark_lsp.engine import cpu_share

    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert cpu_share.usable_cores() == 6 and cpu_share.usable_cpus() is None
    assert CpuWatch(ThreadPolicy(most=2)).cores == 6
