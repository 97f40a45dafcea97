"""A one-thread executor whose thread is a daemon.

concurrent.futures.ThreadPoolExecutor joins its threads at interpreter exit, so an `exit` that arrives
during a 60-second model load would hang the editor's shutdown for a minute. This executor runs jobs in
order on one daemon thread (the service is single-threaded anyway, see loader.py) and never blocks exit.

But a daemon thread must not be *running torch* when the interpreter finalizes: CPython (3.11) ends such
a thread with pthread_exit when the op returns and asks for the GIL back, and the forced unwind through
pybind11's noexcept gil_scoped_release destructor calls std::terminate ("terminate called without an
active exception", SIGABRT, exit code -6/134). `join_all` lets the process entry point find out whether
any worker is still inside a model call before it lets the interpreter finalize (server.run_server).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_STOP = object()

# Every executor whose thread may still run; a running thread's target holds its executor alive.
_LIVE: weakref.WeakSet[SerialExecutor] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class SerialExecutor(Executor):
    def __init__(self, name: str = "dspark-worker") -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit after shutdown")
            future: Future[Any] = Future()
            self._jobs.put((future, fn, args, kwargs))
            return future

    def queued(self) -> int:
        """Jobs submitted and not yet started (approximate while others submit)."""
        return self._jobs.qsize()

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # delivered to whoever awaits the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if cancel_futures:
                pending = []
                while True:
                    try:
                        pending.append(self._jobs.get_nowait())
                    except queue.Empty:
                        break
                for item in pending:
                    if item is not _STOP:
                        item[0].cancel()
            self._jobs.put(_STOP)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def join(self, timeout: float | None) -> bool:
        """Wait for queued work to finish (after shutdown); True if the thread ended in time."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @staticmethod
    def join_all(timeout: float) -> bool:
        """Shut every executor of this process down and wait (one shared deadline) for their threads.

        True when all of them ended: no thread of ours is inside a model call, so the interpreter may
        finalize. At process end no new work may start anyway, hence the shutdown of executors whose
        owner did not (a TCP session's is shut down when it closes; this makes sure of the rest)."""
        deadline = time.monotonic() + timeout
        with _LIVE_LOCK:
            executors = list(_LIVE)
        ended = True
        for executor in executors:
            executor.shutdown(wait=False)
            if not executor.join(max(0.0, deadline - time.monotonic())):
                ended = False
        return ended
