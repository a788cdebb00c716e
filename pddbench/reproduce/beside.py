"""One stage of the main job run in a thread beside the others, on its own process pool whose
workers run at idle priority: they take the cores only where the foreground's workers leave them
idle (the ends of its synchronous rounds, the figures, the trace analysis), so the job's wall time
shrinks by the idle time they fill. The results are the same bytes: every simulation is
deterministic wherever and whenever it runs. With one job (-j 1) or on Ray the stage runs in the
foreground when asked for, as before."""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from pddbench.sweep.executors import Executor, PoolExecutor, default_jobs

T = TypeVar("T")


class Beside(Generic[T]):
    """`work(executor)` started now in a thread (executor: the background pool), or later in the
    foreground (executor None: the work makes its own) when no background pool fits."""

    def __init__(self, work: Callable[[Executor | None], T], jobs: int | None, ray: str | None):
        self._work = work
        self._stop = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self.wall_s: float | None = None
        workers = jobs or default_jobs()
        self._ex = PoolExecutor(workers, idle_only=True, stop=self._stop) if workers > 1 and ray is None else None
        self._thread = threading.Thread(target=self._run, name="pddbench-beside", daemon=True) if self._ex else None
        if self._thread is not None:
            self._thread.start()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._result = self._work(self._ex)
        except BaseException as exc:  # raised where result() is asked for
            self._error = exc
        self.wall_s = time.perf_counter() - started

    def result(self) -> T:
        """The stage's result (waits for it); its error, raised here."""
        if self._thread is None:
            return self._work(None)
        self._thread.join()
        assert self._ex is not None
        self._ex.close()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def cancel(self) -> None:
        """Stop the stage (the foreground failed or was interrupted): its pool's run() raises
        KeyboardInterrupt, so it keeps what an interrupted stage keeps, and its workers end."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        assert self._ex is not None
        self._ex.close(cancel=True)
