"""The proxy's TLS contexts: one for its listeners, one for its connections to the brokers.

Each is built once from its [proxy.tls] / [upstream.tls] section and kept for the proxy's life (the
servers hold it); `reload()` reads the certificate files into the same contexts again, so the
connections accepted or opened after it use the new certificates and those already up keep theirs.
The files are reloaded on SIGHUP and when their modification time changes (`changed()`, polled).
A CA taken out of a file stays trusted until a restart: OpenSSL only adds to a context's store.

`certificate_principal` is who a client is by its verified certificate: the mapped RFC 2253 subject.

`ListenerTls` is TLS on one client connection. The loop's own (uvloop's, as asyncio's before
Python's gh-98078 fix) drops what OpenSSL wrote for the peer when a handshake fails, the alert
included: a client without a certificate, or with one from another CA, saw the connection closed
where `openssl s_server` sends `certificate required` or `unknown ca`, and retried as if the network
had failed; the failure was not logged either (an ssl.SSLError is an OSError: debug only).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from asyncio.sslproto import SSLProtocol, SSLProtocolState
from collections.abc import Callable

from quotagate.security.principal_mapping import PrincipalMapper
from quotagate.security.subject_names import subject_name
from quotagate.security.tls_settings import ListenerTlsConfig, UpstreamTlsConfig

log = logging.getLogger("quotagate.tls")

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsContexts:
    """The listener and upstream contexts (either may be None: plaintext on that side)."""

    def __init__(self, listener: ListenerTlsConfig | None, upstream: UpstreamTlsConfig | None) -> None:
        self.listener_config = listener
        self.upstream_config = upstream
        self.listener: ssl.SSLContext | None = None
        self.upstream: ssl.SSLContext | None = None
        self.mapper = PrincipalMapper(listener.principal_mapping_rules if listener else "DEFAULT")
        if listener is not None:
            # Not create_default_context: it would trust the system's CAs for client certificates.
            self.listener = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.listener.minimum_version = ssl.TLSVersion.TLSv1_2
            self.listener.verify_mode = _VERIFY_MODES[listener.client_auth]
        if upstream is not None:
            self.upstream = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=upstream.ca or None)
            self.upstream.check_hostname = upstream.check_hostname
        self._mtimes = self._file_mtimes()
        self._load()

    def _files(self) -> list[str]:
        paths = []
        if self.listener_config is not None:
            paths += [self.listener_config.cert, self.listener_config.key, self.listener_config.ca]
        if self.upstream_config is not None:
            paths += [self.upstream_config.ca, self.upstream_config.cert, self.upstream_config.key]
        return [path for path in paths if path]

    def _file_mtimes(self) -> dict[str, float]:
        mtimes = {}
        for path in self._files():
            try:
                mtimes[path] = os.stat(path).st_mtime
            except OSError:
                mtimes[path] = -1.0
        return mtimes

    def _load(self) -> None:
        listener, upstream = self.listener_config, self.upstream_config
        if listener is not None and self.listener is not None:
            self.listener.load_cert_chain(listener.cert, listener.key)
            if listener.ca:
                self.listener.load_verify_locations(listener.ca)
        if upstream is not None and self.upstream is not None:
            if upstream.ca:
                self.upstream.load_verify_locations(upstream.ca)
            if upstream.cert:
                self.upstream.load_cert_chain(upstream.cert, upstream.key)

    def changed(self) -> bool:
        """Whether a certificate, key or CA file changed since it was last read."""
        return self._file_mtimes() != self._mtimes

    def reload(self) -> bool:
        """Reads the files again; a file that cannot be read (or a key that does not match its
        certificate) is logged and the contexts keep what they had. Returns whether it worked."""
        self._mtimes = self._file_mtimes()
        if not self._mtimes:
            return True
        try:
            self._load()
        except (OSError, ssl.SSLError) as exc:
            log.error("TLS certificates not reloaded, the ones in use stay: %s", exc)
            return False
        log.info("TLS certificates reloaded: %s", ", ".join(self._mtimes))
        return True


def certificate_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: PrincipalMapper) -> str | None:
    """The user a client's verified certificate names, None without one. Raises NoMatchingRule
    when no mapping rule applies (the broker fails such a client's authentication)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return mapper.name(subject_name(der))


# Why a handshake failed, as a metric label: OpenSSL's reason (its own short list), or what ended it.
HANDSHAKE_TIMEOUT, HANDSHAKE_EOF = "timeout", "closed_by_client"
MAX_REASON_CHARS = 64


def handshake_failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason.lower()[:MAX_REASON_CHARS]
    if isinstance(exc, ConnectionAbortedError):
        return HANDSHAKE_TIMEOUT
    if exc is ConnectionResetError or isinstance(exc, ConnectionResetError):
        return HANDSHAKE_EOF
    return type(exc).__name__.lower()[:MAX_REASON_CHARS]


class ListenerTls(SSLProtocol):
    """TLS on a client connection, as the loop's own does it, except that a failed handshake first
    sends the client what OpenSSL wrote for it (the alert: `certificate required`, `unknown ca`,
    `protocol version`, ...), then is reported to `on_failure(reason, peer)` (logged and counted
    by the proxy). Python's asyncio fixed the same in gh-98078; uvloop 0.23 has not."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app_protocol: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        on_failure: Callable[[str, str], None],
    ) -> None:
        super().__init__(loop, app_protocol, context, None, server_side=True)
        self._on_failure = on_failure

    def _on_handshake_complete(self, handshake_exc: BaseException | type[BaseException] | None) -> None:
        if handshake_exc is not None:
            if self._transport is not None:
                self._process_outgoing()  # the alert, before the transport is closed
            peer = self._transport.get_extra_info("peername") if self._transport is not None else None
            self._on_failure(handshake_failure_reason(handshake_exc), f"{peer[0]}:{peer[1]}" if peer else "?")
        super()._on_handshake_complete(handshake_exc)

    def _check_handshake_timeout(self) -> None:
        if self._state == SSLProtocolState.DO_HANDSHAKE and self._transport is not None:
            peer = self._transport.get_extra_info("peername")
            self._on_failure(HANDSHAKE_TIMEOUT, f"{peer[0]}:{peer[1]}" if peer else "?")
        super()._check_handshake_timeout()
