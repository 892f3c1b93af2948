"""The proxy's side of Kafka's quota admin APIs: answers DescribeClientQuotas and AlterClientQuotas
from its own quotas, persists what AlterClientQuotas sets, and hands the quotas in force to the
engine (live, like a file reload: QuotaEngine.update keeps every bucket's debt).

The session asks `answer` for the response frame; nothing here touches a socket or a clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from quotagate.config.quota_state import save_state
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.client_quotas import (
    AlterResult,
    alter_response,
    decode_alter,
    decode_describe,
    describe_response,
)
from quotagate.protocol.headers import RequestHeader
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.admin import ApiQuotas, alter, describe, effective, prune, refused, source_of

log = logging.getLogger("quotagate.admin")

CLIENT_QUOTA_APIS = frozenset({int(ApiKey.DESCRIBE_CLIENT_QUOTAS), int(ApiKey.ALTER_CLIENT_QUOTAS)})
UNKNOWN_SERVER_ERROR = -1
USER_PRINCIPAL_PREFIX = "User:"


class QuotaAdmin:
    """Quotas from the file and from the API, combined (see quotagate.quotas.admin for the rule)."""

    def __init__(
        self,
        file_quotas: QuotaTable,
        api_quotas: ApiQuotas,
        alter_principals: tuple[str, ...],
        state_path: Path | None,
        apply: Callable[[QuotaTable, float], None],
    ) -> None:
        self.file_quotas = file_quotas
        self.api_quotas = api_quotas
        self.set_alter_principals(alter_principals)
        self.state_path = state_path  # None: kept in memory only
        self._apply = apply  # (quotas in force, now) -> None: the engine's live update

    @property
    def quotas(self) -> QuotaTable:
        """The quotas in force."""
        return effective(self.file_quotas, self.api_quotas)

    def file_changed(self, file_quotas: QuotaTable) -> QuotaTable:
        """The file was reloaded: returns the quotas now in force."""
        self.file_quotas = file_quotas
        prune(self.api_quotas, file_quotas)
        return self.quotas

    def set_alter_principals(self, principals: tuple[str, ...]) -> None:
        self.alter_principals = frozenset(p.removeprefix(USER_PRINCIPAL_PREFIX) for p in principals)

    def source(self, entity: QuotaEntity, key: QuotaKey) -> str:
        """Where the quota in force for (entity, key) came from: "file" or "api"."""
        return source_of(self.api_quotas, entity, key)

    def answer(self, frame: memoryview, header: RequestHeader, user: str, now: float) -> bytes:
        """The response to a DescribeClientQuotas or AlterClientQuotas request from `user`."""
        version = header.api_version
        if header.api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
            query = decode_describe(frame, header.body_offset, version)
            return describe_response(header.correlation_id, version, describe(self.quotas, query))
        request = decode_alter(frame, header.body_offset, version)
        if user not in self.alter_principals:
            message = (
                f"User:{user} may not alter quotagate's quotas: list it in [admin] alter_principals "
                "(without SASL every client is User:ANONYMOUS)"
            )
            return alter_response(header.correlation_id, version, refused(request.alterations, message))
        staged: ApiQuotas = {entity: dict(values) for entity, values in self.api_quotas.items()}
        results = alter(staged, request.alterations, request.validate_only)
        if not request.validate_only and staged != self.api_quotas:
            prune(staged, self.file_quotas)
            try:
                if self.state_path is not None:
                    save_state(self.state_path, staged)
            except OSError as exc:
                log.error("quotas not altered: cannot write %s: %s", self.state_path, exc)
                failed = f"quotagate could not persist the quotas ({exc.strerror}); nothing was changed"
                results = [
                    AlterResult(r.entity, UNKNOWN_SERVER_ERROR, failed) if r.error_code == 0 else r for r in results
                ]
                return alter_response(header.correlation_id, version, results)
            self.api_quotas = staged
            self._apply(self.quotas, now)
            log.info("quotas altered by User:%s through AlterClientQuotas", user)
        return alter_response(header.correlation_id, version, results)
