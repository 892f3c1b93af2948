"""The proxy's side of Kafka's quota admin APIs: answers DescribeClientQuotas and AlterClientQuotas
from its own quotas, persists what AlterClientQuotas sets, and hands the quotas in force to the
engine (live, like a file reload: QuotaEngine.update keeps every bucket's debt).

Who may see and change them is decided first, as the broker decides before it reads the request
further: an AlterClientQuotas from a user not in alter_principals is refused entry by entry from its
bytes, decoded not at all; a DescribeClientQuotas is first asked of the broker on the client's own
connection (describe_access "broker"), which answers with its authorizer's verdict.

The session asks `describe` and `alter` for what to do; nothing here touches a socket or a clock. An
alter that changes the persisted quotas is answered once the state file holds it: `alter` then
returns a future of the frame, and `StateWriter` writes the file in a worker thread, one write at a
time, the alters that arrive meanwhile together in the next (a stream of alters never rewrites and
fsyncs the file on the loop: issue 34 item 5).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quotagate.config.quota_state import save_state
from quotagate.config.settings import (
    DESCRIBE_ACCESS_ALTER_PRINCIPALS,
    DESCRIBE_ACCESS_ANYONE,
    DESCRIBE_ACCESS_BROKER,
)
from quotagate.protocol.client_quotas import (
    CLUSTER_AUTHORIZATION_FAILED,
    AlterResult,
    DescribeQuery,
    DescribeResult,
    alter_refusal,
    alter_response,
    decode_alter,
    decode_describe,
    describe_response,
    describe_verdict,
)
from quotagate.protocol.headers import RequestHeader
from quotagate.protocol.limits import NO_LIMIT
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.admin import ENTITY_TYPES, ApiQuotas, alter, describe, effective, prune, source_of

log = logging.getLogger("quotagate.admin")

UNKNOWN_SERVER_ERROR = -1
USER_PRINCIPAL_PREFIX = "User:"
# A describe filter names each entity type once: among its first len(ENTITY_TYPES) + 1 components
# lies the first problem of one that holds more, which is all the answer says.
DESCRIBE_COMPONENTS_DECODED = len(ENTITY_TYPES) + 1
# What the broker says to a principal it does not authorize (Errors.CLUSTER_AUTHORIZATION_FAILED);
# why, the proxy logs, at most this often.
AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."
REFUSALS_LOGGED_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class PendingDescribe:
    """A DescribeClientQuotas asked of the broker first: answered with the proxy's quotas unless the
    broker refuses the principal."""

    correlation_id: int
    version: int
    query: DescribeQuery


class StateWriter:
    """Writes the state file (save_state) in a worker thread, one write at a time. What is asked for
    while a write is under way goes in the next one, with whatever else is asked meanwhile: a
    stream of alters makes a write per fsync, not one per alter. `write` returns a future that ends
    (with the loop's time) when the file holds that state, or with the write's error; a failed
    write fails the ones queued behind it too (their states were built on the one that failed)."""

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.path = path
        self.loop = loop
        self.writes = 0  # state files written (a test counts them)
        self._queued: list[asyncio.Future[float]] = []
        self._next: ApiQuotas | None = None
        self._writing = False

    def write(self, quotas: ApiQuotas) -> asyncio.Future[float]:
        """`quotas` (not changed afterwards) will be written; the future says when it is durable."""
        written: asyncio.Future[float] = self.loop.create_future()
        self._queued.append(written)
        self._next = quotas
        if not self._writing:
            self._start()
        return written

    def _start(self) -> None:
        waiting, self._queued = self._queued, []
        quotas, self._next = self._next, None
        self._writing = True
        self.writes += 1
        done = self.loop.run_in_executor(None, save_state, self.path, quotas)
        done.add_done_callback(lambda future: self._written(future, waiting))

    def _written(self, done: asyncio.Future[None], waiting: list[asyncio.Future[float]]) -> None:
        self._writing = False
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        if error is not None:
            waiting += self._queued
            self._queued, self._next = [], None
        now = self.loop.time()
        for written in waiting:
            if written.done():
                continue
            if error is not None:
                written.set_exception(error)
            else:
                written.set_result(now)
        if self._queued:
            self._start()


class QuotaAdmin:
    """Quotas from the file and from the API, combined (see quotagate.quotas.admin for the rule)."""

    def __init__(
        self,
        file_quotas: QuotaTable,
        api_quotas: ApiQuotas,
        alter_principals: tuple[str, ...],
        state_path: Path | None,
        apply: Callable[[QuotaTable, float], None],
        describe_access: str = DESCRIBE_ACCESS_BROKER,
        max_decoded_elements: int = NO_LIMIT,
        writer: StateWriter | None = None,
    ) -> None:
        self.file_quotas = file_quotas
        self.api_quotas = api_quotas  # in force (and in the state file)
        # What the alters accepted so far make, ahead of api_quotas while their write is under way:
        # the next alter builds on it.
        self._accepted = api_quotas
        self.set_access(alter_principals, describe_access)
        self.state_path = state_path  # None: kept in memory only
        self._apply = apply  # (quotas in force, now) -> None: the engine's live update
        # Writes the state file off the loop; None: written before `alter` returns (tools, tests).
        self.writer = writer
        self.max_decoded_elements = max_decoded_elements
        self._refusal_logged_at = -REFUSALS_LOGGED_EVERY

    @property
    def quotas(self) -> QuotaTable:
        """The quotas in force."""
        return effective(self.file_quotas, self.api_quotas)

    def file_changed(self, file_quotas: QuotaTable) -> QuotaTable:
        """The file was reloaded: returns the quotas now in force."""
        self.file_quotas = file_quotas
        prune(self.api_quotas, file_quotas)
        if self._accepted is not self.api_quotas:
            prune(self._accepted, file_quotas)
        return self.quotas

    def set_access(self, alter_principals: tuple[str, ...], describe_access: str) -> None:
        """Who may alter ([admin] alter_principals) and describe ([admin] describe_access)."""
        self.alter_principals = frozenset(p.removeprefix(USER_PRINCIPAL_PREFIX) for p in alter_principals)
        self.describe_access = describe_access

    def source(self, entity: QuotaEntity, key: QuotaKey) -> str:
        """Where the quota in force for (entity, key) came from: "file" or "api"."""
        return source_of(self.api_quotas, entity, key)

    def _note_refusal(self, api: str, user: str, now: float) -> None:
        """Says in the log why a principal was refused, at most every REFUSALS_LOGGED_EVERY seconds
        (the answer itself says what the broker's says)."""
        if now >= self._refusal_logged_at + REFUSALS_LOGGED_EVERY:
            self._refusal_logged_at = now
            log.warning("%s from User:%s refused: the user is not in [admin] alter_principals", api, user)

    def describe(
        self, frame: memoryview | bytes, header: RequestHeader, user: str, now: float
    ) -> bytes | PendingDescribe:
        """A DescribeClientQuotas from `user`: the proxy's answer, or, where the broker decides who may
        describe (describe_access "broker"), a PendingDescribe: forward the request, then `answer_after`."""
        version = header.api_version
        query = decode_describe(frame, header.body_offset, version, DESCRIBE_COMPONENTS_DECODED)
        if self.describe_access == DESCRIBE_ACCESS_BROKER:
            return PendingDescribe(header.correlation_id, version, query)
        if self.describe_access == DESCRIBE_ACCESS_ALTER_PRINCIPALS and user not in self.alter_principals:
            self._note_refusal("DescribeClientQuotas", user, now)
            refusal = DescribeResult(CLUSTER_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED_MESSAGE, ())
            return describe_response(header.correlation_id, version, refusal)
        assert self.describe_access in (DESCRIBE_ACCESS_ANYONE, DESCRIBE_ACCESS_ALTER_PRINCIPALS)
        return describe_response(header.correlation_id, version, describe(self.quotas, query))

    def answer_after(self, pending: PendingDescribe, broker_response: memoryview | bytes) -> memoryview | bytes:
        """The answer to a describe the broker saw first: its own, when it refused the principal
        (CLUSTER_AUTHORIZATION_FAILED, as it sent it); else the proxy's quotas, with the throttle the
        broker asked for."""
        refused, throttle_ms = describe_verdict(broker_response, pending.version)
        if refused:
            return broker_response
        result = describe(self.quotas, pending.query)
        return describe_response(pending.correlation_id, pending.version, result, throttle_ms)

    def alter(
        self, frame: memoryview | bytes, header: RequestHeader, user: str, now: float
    ) -> bytes | asyncio.Future[bytes]:
        """The response to an AlterClientQuotas request from `user`; a future of it when its quotas are
        being written to the state file (`writer`). One from a user who may not alter is refused
        before it is decoded; one that may is decoded within max_decoded_elements."""
        version = header.api_version
        if user not in self.alter_principals:
            self._note_refusal("AlterClientQuotas", user, now)
            return alter_refusal(frame, header, CLUSTER_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED_MESSAGE)
        request = decode_alter(frame, header.body_offset, version, self.max_decoded_elements)
        staged: ApiQuotas = {entity: dict(values) for entity, values in self._accepted.items()}
        results = alter(staged, request.alterations, request.validate_only)
        if request.validate_only or staged == self._accepted:
            return alter_response(header.correlation_id, version, results)
        prune(staged, self.file_quotas)
        if self.state_path is not None and self.writer is not None:
            self._accepted = staged
            answered: asyncio.Future[bytes] = self.writer.loop.create_future()
            self.writer.write(staged).add_done_callback(
                lambda written: self._persisted(written, staged, results, header, user, answered)
            )
            return answered
        try:
            if self.state_path is not None:
                save_state(self.state_path, staged)
        except OSError as exc:
            return alter_response(header.correlation_id, version, self._not_persisted(results, exc))
        self._accepted = staged
        self._in_force(staged, user, now)
        return alter_response(header.correlation_id, version, results)

    def _persisted(
        self,
        written: asyncio.Future[float],
        staged: ApiQuotas,
        results: list[AlterResult],
        header: RequestHeader,
        user: str,
        answered: asyncio.Future[bytes],
    ) -> None:
        """An alter's state was written (or not): its quotas are put in force, then it is answered."""
        error = written.exception() if not written.cancelled() else None
        if error is not None or written.cancelled():
            self._accepted = self.api_quotas  # what later alters built on this one fails with it
            results = self._not_persisted(results, error if isinstance(error, OSError) else None)
        else:
            self._in_force(staged, user, written.result())
        if not answered.done():
            answered.set_result(alter_response(header.correlation_id, header.api_version, results))

    def _in_force(self, staged: ApiQuotas, user: str, now: float) -> None:
        self.api_quotas = staged
        self._apply(self.quotas, now)
        log.info("quotas altered by User:%s through AlterClientQuotas", user)

    def _not_persisted(self, results: list[AlterResult], exc: OSError | None) -> list[AlterResult]:
        reason = exc.strerror if exc is not None else "the write did not complete"
        log.error("quotas not altered: cannot write %s: %s", self.state_path, exc)
        failed = f"quotagate could not persist the quotas ({reason}); nothing was changed"
        return [AlterResult(r.entity, UNKNOWN_SERVER_ERROR, failed) if r.error_code == 0 else r for r in results]
