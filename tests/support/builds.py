"""The two builds of quotagate's compiled modules (quotagate/compiled.py) side by side in one process:
the session and connection classes over the compiled cores, and over the same sources interpreted.
tests/unit/conftest.py's `build` fixture runs a test on each, as uvicorn runs its protocol tests on
both of its HTTP implementations.

The interpreted classes are the interpreted session core (whose policy handlers, session.py, are
the same for both) and the production mixins (`ClientGlue`, `UpstreamGlue`) over the interpreted
cores, which import the other compiled modules' sources, never their builds: a compiled
`ClientCore` only takes a compiled session, so each build is whole.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import cache

import pytest

from quotagate import compiled
from quotagate.proxy import connection_core, session_core
from quotagate.proxy.connection import ClientConnection, ClientGlue, UpstreamConnection, UpstreamGlue
from quotagate.proxy.session import Session
from quotagate.quotas import QuotaEngine
from tests.support.session_double import session_with

COMPILED, INTERPRETED = "compiled", "interpreted"
BUILDS = (COMPILED, INTERPRETED)


@dataclass(frozen=True)
class Build:
    name: str
    session: type[Session]
    client: type[ClientConnection]
    upstream: type[UpstreamConnection]

    def session_with(self, config: str = "", top_level: str = "") -> tuple[Session, QuotaEngine]:
        """session_double.session_with, with this build's session."""
        return session_with(config, top_level, self.session)


@cache
def build(name: str) -> Build | None:
    """The classes of build `name`; None for "compiled" where this process runs none (not built, or
    QUOTAGATE_NO_EXTENSIONS=1)."""
    if name == COMPILED:
        return Build(COMPILED, Session, ClientConnection, UpstreamConnection) if compiled.COMPILED else None
    if not compiled.COMPILED:  # the loaded classes are the interpreted ones already
        return Build(INTERPRETED, Session, ClientConnection, UpstreamConnection)

    InterpretedSession = session_core.SessionCore

    class InterpretedUpstream(UpstreamGlue, connection_core.UpstreamCore, asyncio.Protocol):
        pass

    class InterpretedClient(ClientGlue, connection_core.ClientCore, asyncio.Protocol):
        session_class = InterpretedSession
        upstream_class = InterpretedUpstream

    return Build(INTERPRETED, InterpretedSession, InterpretedClient, InterpretedUpstream)  # type: ignore[arg-type]


def build_or_skip(name: str) -> Build:
    """What a `build` fixture gives a test: build `name`, or a skip where this process has none."""
    classes = build(name)
    if classes is None:
        pytest.skip("no compiled build in this process (not built, or QUOTAGATE_NO_EXTENSIONS=1)")
    return classes
