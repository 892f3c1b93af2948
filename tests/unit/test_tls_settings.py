"""[proxy.tls] and [upstream.tls]: their settings live in quotagate.security, which the config package
imports and which never imports it back; their rules that span keys name the key in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotagate.config import ConfigError, parse_config
from quotagate.security.tls_settings import ListenerTlsConfig, UpstreamTlsConfig

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = '[proxy]\nbootstrap_servers = ["k:1"]\n'


def test_the_security_package_never_imports_the_config_package() -> None:
    importing = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "quotagate" / "security").glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "quotagate.config" in line
    ]
    assert not importing, f"security/ must not import config/ (config imports security): {importing}"


@pytest.fixture
def pem(tmp_path: Path) -> str:
    path = tmp_path / "server.pem"
    path.write_text("not read by parse_config, only checked to exist\n")
    return str(path)


def test_listener_and_upstream_tls_are_parsed_into_the_security_types(pem: str) -> None:
    config = parse_config(
        MINIMAL
        + f'[proxy.tls]\ncert = "{pem}"\nkey = "{pem}"\nca = "{pem}"\nclient_auth = "required"\n'
        + f'principal_mapping_rules = "RULE:^CN=(.*?),.*$/$1/L,DEFAULT"\n[upstream.tls]\nca = "{pem}"\n'
    )
    assert config.proxy_tls == ListenerTlsConfig(pem, pem, pem, "required", "RULE:^CN=(.*?),.*$/$1/L,DEFAULT")
    assert config.upstream_tls == UpstreamTlsConfig(ca=pem)


@pytest.mark.parametrize(
    ("tls", "key", "problem"),
    [
        ("[proxy.tls]\n", "proxy.tls.cert", "is required: a PEM file"),
        ('[proxy.tls]\ncert = ""\nkey = "{pem}"\n', "proxy.tls.cert", "is required: a PEM file"),
        (
            '[proxy.tls]\ncert = "{pem}"\nkey = "{pem}"\nclient_auth = "required"\n',
            "proxy.tls.ca",
            "is required: a PEM file",
        ),
        (
            '[proxy.tls]\ncert = "{pem}"\nkey = "{pem}"\nclient_auth = "always"\n',
            "proxy.tls.client_auth",
            "must be one of none, requested, required, got 'always'",
        ),
        ('[proxy.tls]\ncert = "{pem}"\nkey = "/no/such.pem"\n', "proxy.tls.key", "/no/such.pem: no such file"),
        (
            '[proxy.tls]\ncert = "{pem}"\nkey = "{pem}"\nprincipal_mapping_rules = "RULE:x"\n',
            "proxy.tls.principal_mapping_rules",
            "invalid rule: 'RULE:x'",
        ),
        (
            '[proxy.tls]\ncert = "{pem}"\nkey = "{pem}"\nciphers = "x"\n',
            "proxy.tls.ciphers",
            "unknown key (known: ca, cert, client_auth, key, principal_mapping_rules)",
        ),
        ("[upstream.tls]\ncheck_hostname = 1\n", "upstream.tls.check_hostname", "must be true or false, got 1"),
        ('[upstream.tls]\ncert = "{pem}"\n', "upstream.tls.key", "is required: a PEM file"),
        ('[upstream.tls]\nkey = "{pem}"\n', "upstream.tls.cert", "is required when key is given"),
        ("[upstream]\ntls = 1\n", "upstream.tls", "must be a table ([upstream.tls])"),
    ],
)
def test_bad_tls_settings_name_the_key(pem: str, tls: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + tls.replace("{pem}", pem))
    assert (info.value.key, info.value.problem) == (key, problem)
