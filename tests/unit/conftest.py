"""tests/unit is the inner loop (`make test-fast`): no socket, no process, no sleep, so no JVM, no
external tool and no broker either. Every test here runs under a guard that fails it, naming what it
called, if it binds or connects a socket, starts a process or sleeps. A test that needs one of those
belongs in tests/loopback (sockets on 127.0.0.1, quotagate as a process, real time passing),
tests/tools (a program outside the venv: promtool, the compose tools, java, ss) or tests/integration
(a real Kafka or Redis). Fixtures of tests/support's plugins start such things, so they are refused too.

The guard patches the Python entry points those go through (socket methods, the event loop's
server and connection makers, subprocess.Popen and os.fork/posix_spawn, time.sleep and a non-zero
asyncio.sleep). asyncio.sleep(0), a plain yield to the loop, stays allowed; the event loop's own
wake-up socketpair is neither bound nor connected, so it is allowed too.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.builds import BUILDS, Build, build_or_skip

_REAL_ASYNCIO_SLEEP = asyncio.sleep


class UnitTestLeftItsLane(AssertionError):
    """A unit test used a socket, a process or a sleep."""


# Threads that were running before the guard started: in a whole-suite run, other folders' tests
# leave some (py4j's for the session's SparkSession, which sleeps and connects), and they are not
# the unit tests' doing, so they keep the real functions.
_THREADS_BEFORE_GUARD: set[int] = set()


def _refuse(what: str, real: Callable[..., Any] | None = None) -> Callable[..., Any]:
    def refused(*args: object, **kwargs: object) -> Any:
        if real is not None and threading.get_ident() in _THREADS_BEFORE_GUARD:
            return real(*args, **kwargs)
        raise UnitTestLeftItsLane(
            f"tests/unit must not use {what}: move this test to tests/loopback (loopback sockets, quotagate "
            "processes, real time), tests/tools (programs outside the venv) or tests/integration (Kafka, Redis)"
        )

    return refused


async def _sleep_without_waiting(delay: float, result: object = None) -> object:
    if delay > 0:
        _refuse(f"asyncio.sleep({delay})")()
    return await _REAL_ASYNCIO_SLEEP(0, result)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A fixture of tests/support's plugins starts something (a broker, a proxy, Redis, a broker double
    on a port), and a session-scoped one would start before the guard below: refuse them here."""
    for item in items:
        if "tests/unit/" not in item.nodeid:
            continue
        fixture_info = getattr(item, "_fixtureinfo", None)
        for name, definitions in fixture_info.name2fixturedefs.items() if fixture_info else ():
            if any(getattr(d.func, "__module__", "").startswith("tests.support.") for d in definitions):
                item.add_marker(pytest.mark.usefixtures("_refused_fixture"))
                item.user_properties.append(("refused_fixture", name))


@pytest.fixture
def _refused_fixture(request: pytest.FixtureRequest) -> None:
    names = [value for key, value in request.node.user_properties if key == "refused_fixture"]
    raise UnitTestLeftItsLane(f"tests/unit must not use the fixture {', '.join(names)}: it starts a server or process")


@pytest.fixture(scope="package", autouse=True)
def no_socket_process_or_sleep() -> Iterator[None]:
    """Package scoped, so that module-scoped fixtures of tests/unit run under it too."""
    patch = pytest.MonkeyPatch()
    _THREADS_BEFORE_GUARD.clear()
    current = threading.current_thread()
    _THREADS_BEFORE_GUARD.update(t.ident for t in threading.enumerate() if t is not current and t.ident)
    for method in ("bind", "connect", "connect_ex", "listen"):
        patch.setattr(socket.socket, method, _refuse(f"socket.{method}", getattr(socket.socket, method)))
    patch.setattr(socket, "create_connection", _refuse("socket.create_connection", socket.create_connection))
    for method in ("create_server", "create_connection", "create_unix_server", "create_unix_connection"):
        patch.setattr(asyncio.BaseEventLoop, method, _refuse(f"loop.{method}"))
    patch.setattr(subprocess.Popen, "_execute_child", _refuse("a subprocess"))
    for function in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, function):
            patch.setattr(os, function, _refuse(f"os.{function}"))
    patch.setattr(time, "sleep", _refuse("time.sleep", time.sleep))
    patch.setattr(asyncio, "sleep", _sleep_without_waiting)
    try:
        yield
    finally:
        patch.undo()


@pytest.fixture(scope="session", params=BUILDS)
def build(request: pytest.FixtureRequest) -> Build:
    """The session and connection classes of one build: every session and connection test runs on
    both, compiled and interpreted (the compiled one is skipped where none is loaded). Session scoped:
    a build is immutable, and hypothesis' tests may take it."""
    return build_or_skip(request.param)
