"""The TLS contexts over real loopback handshakes: certificates reloaded for new connections, the
client certificate's mapped subject as the principal, and the [proxy.tls]/[upstream.tls] keys."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import pytest
import trustme

from quotagate.config import ConfigError, parse_config
from quotagate.config.reference import effective_toml
from quotagate.security.principal_mapping import NoMatchingRule, PrincipalMapper
from quotagate.security.tls import TlsContexts, certificate_principal

PROXY = '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n'


def write_leaf(directory: Path, name: str, leaf: trustme.LeafCert) -> tuple[str, str]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def listener_toml(cert: str, key: str, ca: str = "", client_auth: str = "none", rules: str = "DEFAULT") -> str:
    return (
        f'[proxy.tls]\ncert = "{cert}"\nkey = "{key}"\nca = "{ca}"\nclient_auth = "{client_auth}"\n'
        f'principal_mapping_rules = "{rules}"\n'
    )


async def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[str, str | None]:
    """One TLS connection: (the CN the client saw, the principal the server mapped)."""
    seen: dict[str, str | None] = {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(True)
        seen["principal"] = certificate_principal(writer.get_extra_info("ssl_object"), PrincipalMapper(RULES))
        writer.close()

    server_task = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = server_task.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
    peer = writer.get_extra_info("peercert")
    await reader.read()
    writer.close()
    server_task.close()
    await server_task.wait_closed()
    common_name = next(value for rdn in peer["subject"] for key, value in rdn if key == "commonName")
    return common_name, seen.get("principal")


RULES = "RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/L, DEFAULT"
served: list[bool] = []  # one entry per connection the server side accepted


async def test_new_connections_get_the_certificate_written_after_a_reload(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, "proxy", ca.issue_cert("127.0.0.1", common_name="first"))
    config = parse_config(PROXY + listener_toml(cert, key))
    contexts = TlsContexts(config.proxy_tls, None)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    assert (await handshake(contexts.listener, client))[0] == "first"
    assert not contexts.changed()
    write_leaf(tmp_path, "proxy", ca.issue_cert("127.0.0.1", common_name="renewed"))
    os.utime(cert, (1, 1))  # a renewal lands within the mtime's resolution: make the change visible
    assert contexts.changed()
    assert contexts.reload()
    assert (await handshake(contexts.listener, client))[0] == "renewed"


async def test_a_broken_renewal_keeps_the_certificate_in_use(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, "proxy", ca.issue_cert("127.0.0.1", common_name="first"))
    contexts = TlsContexts(parse_config(PROXY + listener_toml(cert, key)).proxy_tls, None)
    Path(key).write_text("not a key")
    assert not contexts.reload()
    client = ssl.create_default_context()
    ca.configure_trust(client)
    assert (await handshake(contexts.listener, client))[0] == "first"


async def test_a_verified_client_certificate_names_the_user_by_the_mapping_rules(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, "proxy", ca.issue_cert("127.0.0.1", common_name="proxy"))
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    config = parse_config(PROXY + listener_toml(cert, key, str(ca_path), "required", RULES))
    contexts = TlsContexts(config.proxy_tls, None)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    ca.issue_cert("alice.test", common_name="Alice", organization_unit_name="ServiceUsers").configure_cert(client)
    assert (await handshake(contexts.listener, client))[1] == "alice"
    anonymous = ssl.create_default_context()
    ca.configure_trust(anonymous)
    # required: without a certificate the server side never gets a connection (with TLS 1.3 the
    # client learns it at its first read, or as a reset)
    served.clear()
    try:
        await handshake(contexts.listener, anonymous)
    except (ssl.SSLError, ConnectionError):
        pass
    assert not served, "a client without a certificate was let in"


def test_no_matching_rule_means_no_principal() -> None:
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/").name("CN=bob,OU=Other,O=x")


def test_tls_sections_are_validated_and_printed_back(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, "proxy", ca.issue_cert("127.0.0.1"))
    with pytest.raises(ConfigError) as error:
        parse_config(PROXY + listener_toml(cert, key, client_auth="required"))
    assert error.value.key == "proxy.tls.ca"
    with pytest.raises(ConfigError) as error:
        parse_config(PROXY + listener_toml(cert, key, client_auth="maybe"))
    assert error.value.key == "proxy.tls.client_auth"
    with pytest.raises(ConfigError) as error:
        parse_config(PROXY + listener_toml(cert, key, rules="RULE:^CN=(.*?)$/$1/LU"))
    assert error.value.key == "proxy.tls.principal_mapping_rules"
    with pytest.raises(ConfigError) as error:
        parse_config(PROXY + f'[upstream.tls]\nkey = "{key}"\n')
    assert error.value.key == "upstream.tls.cert"
    with pytest.raises(ConfigError) as error:
        parse_config(PROXY + '[upstream.tls]\nca = "/nonexistent/ca.pem"\n')
    assert error.value.key == "upstream.tls.ca"
    config = parse_config(PROXY + listener_toml(cert, key) + f'[upstream.tls]\ncert = "{cert}"\nkey = "{key}"\n')
    assert config.upstream_tls is not None and config.upstream_tls.check_hostname
    assert parse_config(effective_toml(config)) == config
