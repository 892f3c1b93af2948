"""The proxy's background tasks, kept running: none may die silently.

Each task runs under `Supervisor.start`. When it raises, the failure is logged with its traceback
and counted (`quotagate_background_task_failures_total{task}`), then the task is started again
after a backoff (0.1 s doubling to 30 s, back to 0.1 s once a run lasted a minute), or, for a task
the process cannot go on without (`restart=False`), `on_fatal` is called: the proxy then stops and
exits non-zero so the service manager starts it again. A task that returns is done (a one-off, or
a loop with nothing left to do); cancelling it (shutdown) is never a failure.
docs/architecture.md names each task and what happens to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("quotagate.supervisor")

# A task that has not stopped this long after a cancel is cancelled again (see cancel_all), at most
# CANCEL_ROUNDS times; then the shutdown goes on without it, logged.
CANCEL_WAIT_SECONDS = 1.0
CANCEL_ROUNDS = 10
RESTART_MIN_SECONDS = 0.1
RESTART_MAX_SECONDS = 30.0
# A run that lasted this long was healthy: the next failure starts again after the shortest backoff.
STABLE_SECONDS = 60.0

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


def stop_if_cancel_was_swallowed() -> None:
    """Raises CancelledError if this task was cancelled and the CancelledError got lost on the way.
    Python 3.11's asyncio.wait_for returns the inner result when it completes at the moment the task
    awaiting it is cancelled, dropping the CancelledError (gh-86296, fixed in 3.12), and a library's
    call may lose one the same way; the task still counts the request (Task.cancelling). A loop that
    must stop on a cancel calls this once per pass."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Supervisor:
    def __init__(self, on_failure: Callable[[str], None], on_fatal: Callable[[str], None]) -> None:
        self._on_failure = on_failure  # (task name) -> None: counts the failure
        self._on_fatal = on_fatal  # (task name) -> None: the process cannot go on
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, name: str, run: TaskFactory, restart: bool = True) -> asyncio.Task[None]:
        """Runs `run()` as task `name`; a new coroutine from `run` for each start."""
        task = asyncio.get_running_loop().create_task(self._supervise(name, run, restart), name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _supervise(self, name: str, run: TaskFactory, restart: bool) -> None:
        loop = asyncio.get_running_loop()
        delay = RESTART_MIN_SECONDS
        while True:
            started = loop.time()
            try:
                await run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task %s failed", name)
                self._on_failure(name)
                if not restart:
                    log.critical("background task %s cannot be started again: stopping", name)
                    self._on_fatal(name)
                    return
            if loop.time() - started >= STABLE_SECONDS:
                delay = RESTART_MIN_SECONDS
            log.warning("starting background task %s again in %.1f s", name, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_MAX_SECONDS)

    async def cancel_all(self) -> None:
        """Cancels every task and waits for them (a task's own cleanup, such as a flush, runs); the
        one calling this (the shutdown) goes on. A task still running a second after its cancel lost
        it (see stop_if_cancel_was_swallowed) and is cancelled again, for at most CANCEL_ROUNDS
        seconds: a shutdown never hangs on one task."""
        pending = {task for task in self.tasks if task is not asyncio.current_task()}
        for round_ in range(CANCEL_ROUNDS):
            if not pending:
                return
            if round_:
                log.warning("background tasks still running after a cancel, cancelling again: %s", _names(pending))
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=CANCEL_WAIT_SECONDS)
        if pending:
            log.error("background tasks did not stop after %d cancels, going on: %s", CANCEL_ROUNDS, _names(pending))


def _names(tasks: set[asyncio.Task[None]]) -> str:
    return ", ".join(sorted(task.get_name() for task in tasks))
