import tomllib

import pytest

from quotagate.config import ConfigError, parse_config
from quotagate.config.reference import ARRAY_OF_TABLES, TOP_LEVEL, config_sections


def test_minimal_config_gets_documented_defaults() -> None:
    config = parse_config('[proxy]\nbootstrap_servers = ["kafka-1:9092", "[::1]:9093"]\n')
    assert config.proxy.bootstrap_servers == (("kafka-1", 9092), ("::1", 9093))
    assert (config.proxy.port, config.proxy.broker_port_base, config.proxy.advertised_host) == (9192, 9193, "127.0.0.1")
    assert config.proxy.broker_port(3) == 9196
    assert config.metrics.port == 9190


def test_broker_port_base_defaults_to_the_port_after_the_bootstrap_port() -> None:
    config = parse_config('[proxy]\nbootstrap_servers = ["k:9092"]\nport = 30000\n')
    assert config.proxy.broker_port(1) == 30002


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("", "proxy", "section is missing"),
        ("[proxy]\n", "proxy.bootstrap_servers", "is required"),
        ('[proxy]\nbootstrap_servers = "k:9092"\n', "proxy.bootstrap_servers", 'list of "host:port" strings'),
        ("[proxy]\nbootstrap_servers = []\n", "proxy.bootstrap_servers", "is required"),
        ('[proxy]\nbootstrap_servers = ["k"]\n', "proxy.bootstrap_servers", "host:port"),
        ('[proxy]\nbootstrap_servers = ["k:99999"]\n', "proxy.bootstrap_servers", "1..65535"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nport = "x"\n', "proxy.port", "integer in 1..65535"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nprot = 1\n', "proxy.prot", "unknown key"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nlisten_host = "0.0.0.0"\n', "proxy.advertised_host", "required"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nconnect_timeout_seconds = 0\n', "proxy.connect_timeout_seconds", "> 0"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\n[metrics]\nport = true\n', "metrics.port", "integer"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\n[metric]\n', "metric", "unknown key"),
        ("[proxy\n", "file", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key_and_the_problem(text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.key == key
    assert problem in info.value.problem


QUOTA_BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'


def test_quotas_and_window_settings_are_parsed() -> None:
    config = parse_config(
        "quota_window_num = 2\ncontroller_quota_window_num = 100\n"
        + QUOTA_BASE
        + '[[quotas]]\nuser = "alice"\nproducer_byte_rate = 200000\nrequest_percentage = 12.5\n'
        + '[[quotas]]\nclient_id = "<default>"\nconsumer_byte_rate = 1e6\n'
    )
    from quotagate.quotas import QuotaKey

    assert config.windows.quota_window_num == 2 and config.windows.controller_quota_window_num == 100
    assert config.windows.quota_window_size_seconds == 1
    assert config.quotas.resolve("alice", "x", QuotaKey.PRODUCER_BYTE_RATE).value == 200000
    assert config.quotas.resolve("alice", "x", QuotaKey.REQUEST_PERCENTAGE).value == 12.5
    assert config.quotas.resolve("bob", "x", QuotaKey.CONSUMER_BYTE_RATE).level == 8


@pytest.mark.parametrize(
    ("quotas", "key", "problem"),
    [
        ("[[quotas]]\nproducer_byte_rate = 1\n", "quotas[0]", "needs user, client_id or both"),
        ('[[quotas]]\nuser = "a"\n', "quotas[0]", "sets no quota"),
        ('[[quotas]]\nuser = "a"\nproduce_byte_rate = 1\n', "quotas[0].produce_byte_rate", "unknown key"),
        ('[[quotas]]\nuser = "a"\nproducer_byte_rate = 0\n', "quotas[0].producer_byte_rate", "greater than 0"),
        ('[[quotas]]\nuser = "a"\nproducer_byte_rate = 1.5\n', "quotas[0].producer_byte_rate", "whole bytes"),
        ('[[quotas]]\nuser = ""\nproducer_byte_rate = 1\n', "quotas[0].user", "non-empty string"),
        (
            '[[quotas]]\nuser = "a"\nproducer_byte_rate = 1\n[[quotas]]\nuser = "a"\nconsumer_byte_rate = 1\n',
            "quotas[1]",
            "already given quotas in quotas[0]",
        ),
    ],
)
def test_bad_quota_entries_name_the_entry_and_the_key(quotas: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(QUOTA_BASE + quotas)
    assert info.value.key == key
    assert problem in info.value.problem


def test_window_settings_must_be_positive_integers() -> None:
    with pytest.raises(ConfigError, match=r"quota_window_num: must be an integer in 1\.\.3600"):
        parse_config("quota_window_num = 0\n" + QUOTA_BASE)


def test_topic_threshold_for_a_topic_name_with_dots() -> None:
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["k:1"]\n'
        '[topic_thresholds]\ntotal_bytes_in_per_sec = 1000\n[topic_thresholds.topics]\n"orders.v1" = 400\n'
    )
    assert config.topic_thresholds is not None
    assert dict(config.topic_thresholds.topics) == {"orders.v1": 400}


def test_unquoted_dotted_topic_name_is_explained() -> None:
    with pytest.raises(ConfigError, match=r'quote a topic name that holds dots: "orders.v1"'):
        parse_config(
            '[proxy]\nbootstrap_servers = ["k:1"]\n'
            "[topic_thresholds]\ntotal_bytes_in_per_sec = 1000\n[topic_thresholds.topics]\norders.v1 = 400\n"
        )


# ------------------------------------------------------------------------------ one parser for every key

MINIMAL = '[proxy]\nbootstrap_servers = ["k:1"]\n'


def _number_keys() -> list[tuple[str, str, str]]:
    """(TOML text before the key, the key as errors name it, its bounds) for every integer and number key."""
    keys = []
    for section in config_sections():
        if section.shape == ARRAY_OF_TABLES or section.attribute == "topic_thresholds":
            continue  # parsed by hand: [[quotas]] entries and the per-topic table
        for key in section.keys:
            if key.toml_type not in ("integer", "number"):
                continue
            if section.shape == TOP_LEVEL:
                keys.append(("", key.name, key.bounds))
            elif section.toml_name == "proxy":
                keys.append((MINIMAL, f"proxy.{key.name}", key.bounds))
            else:
                keys.append((f"{MINIMAL}[{section.toml_name}]\n", f"{section.toml_name}.{key.name}", key.bounds))
    return keys


def test_every_number_key_states_its_bounds() -> None:
    keys = _number_keys()
    assert len(keys) >= 25
    unbounded = [key for _, key, bounds in keys if not bounds]
    assert not unbounded, f"give these fields min/max in their metadata: {unbounded}"


@pytest.mark.parametrize(("before", "key", "bounds"), _number_keys(), ids=lambda item: str(item)[:40])
def test_a_number_out_of_its_bounds_is_refused_naming_the_key(before: str, key: str, bounds: str) -> None:
    name = key.rpartition(".")[2]
    if ".." in bounds:
        low, high = (int(part) for part in bounds.split(".."))
        bad_values = [str(low - 1), str(high + 1), "1.5", "true", '"1"']
        expected = f"must be an integer in {low}..{high}"
    else:
        high_text = bounds.rpartition(" ")[2]
        bad_values = ["0", "-1", str(float(high_text) * 2), "nan", "inf", "true", '"1"']
        expected = f"must be a number > 0 and at most {high_text}"
    for bad in bad_values:
        text = f"{name} = {bad}\n{MINIMAL}" if not before else f"{before}{name} = {bad}\n"
        with pytest.raises(ConfigError) as info:
            parse_config(text)
        assert info.value.key == key, (bad, info.value)
        assert info.value.problem == f"{expected}, got {_parsed(text, name)!r}", bad


def test_a_default_computed_from_another_key_is_held_to_its_bounds() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + "port = 65535\n")
    assert (info.value.key, info.value.problem) == (
        "proxy.broker_port_base",
        "must be an integer in 1..65535, got 65536",
    )


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('[usage]\nsink = "csv"\n', "usage.sink", "must be one of parquet, jsonl, kafka, got 'csv'"),
        ("[usage]\nenabled = 1\n", "usage.enabled", "must be true or false, got 1"),
        ("[usage]\ndirectory = 5\n", "usage.directory", "must be a string, got 5"),
        (
            '[cluster]\nredis_password_file = "/no/such/file"\n',
            "cluster.redis_password_file",
            "/no/such/file: no such file",
        ),
        (
            '[cluster]\nredis_url = "http://r"\n',
            "cluster.redis_url",
            "must start with redis://, rediss:// or unix://, got 'http://r'",
        ),
        ("[metrics]\nworker_ports = [0]\n", "metrics.worker_ports[0]", "must be an integer in 1..65535, got 0"),
        (
            '[admin]\nalter_principals = [""]\n',
            "admin.alter_principals",
            'must be a list of user names, e.g. ["admin"]',
        ),
        (
            "[admin]\nquota_apis = 1\n",
            "admin.quota_apis",
            "unknown key (known: alter_principals, describe_access, quota_api, state_file)",
        ),
    ],
)
def test_each_rule_of_a_field_is_applied_naming_the_key(text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + text)
    assert (info.value.key, info.value.problem) == (key, problem)


def _parsed(text: str, name: str) -> object:
    """The value of `name` as TOML reads it from `text` (wherever its table is)."""
    data = tomllib.loads(text)
    for table in (data, *(value for value in data.values() if isinstance(value, dict))):
        if name in table and not isinstance(table[name], dict):
            return table[name]
    raise KeyError(name)
