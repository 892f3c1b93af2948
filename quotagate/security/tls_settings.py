"""The TLS settings of both sides of the proxy: [proxy.tls] (its listeners) and [upstream.tls] (its
connections to the brokers), as the configuration file states them.

Each key's type, default and rules are in its field, as for every section of the file (see
config/settings.py, which parses them): "doc" (its meaning), "required" (what to give when
it is missing), "file" (a path that must exist), "choices", "check" (a function that raises
ValueError naming the problem). The rules that span keys are each class's `problem()`. This module
knows nothing of the configuration file around it: the config package imports it, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quotagate.security.principal_mapping import PrincipalMapper

CLIENT_AUTH_MODES = ("none", "requested", "required")


def check_principal_mapping_rules(rules: str) -> None:
    """Raises ValueError naming the rule that cannot be parsed."""
    PrincipalMapper(rules)


@dataclass(frozen=True)
class ListenerTlsConfig:
    """TLS on the proxy's listeners (clients connect with security.protocol SSL or SASL_SSL)."""

    cert: str = field(
        metadata={
            "doc": "PEM file of the proxy's certificate chain, shown to clients. Required.",
            "required": "a PEM file",
            "file": True,
        }
    )
    key: str = field(
        metadata={"doc": "PEM file of its private key (unencrypted). Required.", "required": "a PEM file", "file": True}
    )
    ca: str = field(
        default="",
        metadata={
            "doc": "PEM file of the CAs client certificates must chain to; required unless client_auth is none.",
            "file": True,
        },
    )
    client_auth: str = field(
        default="none",
        metadata={
            "doc": "Client certificates, as the broker's ssl.client.auth: none, requested (verified if given) "
            "or required. A verified certificate's subject, mapped by principal_mapping_rules, is the user "
            "until SASL names another.",
            "choices": CLIENT_AUTH_MODES,
        },
    )
    principal_mapping_rules: str = field(
        default="DEFAULT",
        metadata={
            "doc": "The broker's ssl.principal.mapping.rules: RULE:pattern/replacement/[LU] and DEFAULT (the "
            "RFC 2253 subject), comma-separated, the first that matches wins; a certificate no rule matches "
            "is refused.",
            "check": check_principal_mapping_rules,
        },
    )

    def problem(self) -> tuple[str, str] | None:
        """The key and what is wrong with it, for a rule that spans keys; None when there is none."""
        if self.client_auth != "none" and not self.ca:
            return "ca", "is required: a PEM file"
        return None


@dataclass(frozen=True)
class UpstreamTlsConfig:
    """TLS from the proxy to the brokers (their SSL or SASL_SSL listeners)."""

    ca: str = field(
        default="",
        metadata={
            "doc": "PEM file of the CAs broker certificates chain to.",
            "default": "the system's CAs",
            "file": True,
        },
    )
    cert: str = field(
        default="",
        metadata={
            "doc": "PEM file of the proxy's client certificate chain, for brokers with ssl.client.auth.",
            "file": True,
        },
    )
    key: str = field(
        default="", metadata={"doc": "PEM file of that certificate's private key (unencrypted).", "file": True}
    )
    check_hostname: bool = field(
        default=True,
        metadata={
            "doc": "Check that a broker's certificate names the host the proxy connects to "
            "(ssl.endpoint.identification.algorithm = https)."
        },
    )

    def problem(self) -> tuple[str, str] | None:
        """The key and what is wrong with it, for a rule that spans keys; None when there is none."""
        if self.cert and not self.key:
            return "key", "is required: a PEM file"
        if self.key and not self.cert:
            return "cert", "is required when key is given"
        return None
