"""Any bytes in the files the proxy reads back at start give a clean answer (issue 34, item 8).

The state file ([admin] state_file: quotas set through AlterClientQuotas) holds what operators rely
on: a file the proxy cannot take stops the start with exit 2 and a message naming the file, and the
entry and key where there is one, never a traceback; an entry is taken only if AlterClientQuotas
would have taken it. The bucket levels beside it only keep debts across a restart: a file the proxy
cannot take is forgiven as a lost one (every bucket starts full), logged and counted, and the proxy
starts. Both loaders are fuzzed as tests/unit/test_protocol_fuzz.py fuzzes frames: random and mutated
bytes grown from files the proxy wrote, and hostile JSON values put anywhere in such a file.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotagate.cli import main
from quotagate.config import ConfigError, parse_config
from quotagate.config.quota_state import levels_path, load_levels, load_state, save_levels, save_state
from quotagate.protocol.client_quotas import Alteration, QuotaOp
from quotagate.proxy.server import Proxy
from quotagate.quotas import QuotaEntity, QuotaKey
from quotagate.quotas.admin import ApiQuotas, check_alteration, entity_parts
from quotagate.quotas.entities import DEFAULT, IpQuotaKey
from tests.support.fuzz import FUZZ

# Loading a small file is cheap: more examples than the protocol fuzz takes, still derandomized.
FILE_FUZZ = settings(FUZZ, max_examples=200)

PRODUCE, REQUEST = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE
SEED_QUOTAS: ApiQuotas = {
    QuotaEntity("alice", None): {PRODUCE: 1024.0, REQUEST: None},
    QuotaEntity("alice", "app"): {QuotaKey.CONSUMER_BYTE_RATE: 2048.0},
    QuotaEntity(DEFAULT, DEFAULT): {PRODUCE: 10.0},
    QuotaEntity(None, None, "fleet-"): {PRODUCE: 5.0},
    QuotaEntity(ip="::1"): {IpQuotaKey.CONNECTION_CREATION_RATE: 3.0},  # type: ignore[dict-item]
}
SEED_LEVELS = {("producer_byte_rate", "user", "alice", None): -4000.0, ("request_percentage", "user", "b", "c"): 1.5}
NESTED_200_000 = "[" * 200_000 + "]" * 200_000


def seed_state(tmp_path: Path) -> bytes:
    save_state(tmp_path / "seed.json", SEED_QUOTAS)
    return (tmp_path / "seed.json").read_bytes()


def entry(**fields: Any) -> str:
    return json.dumps({"version": 1, "quotas": [{"user": "u", "client_id": None, **fields}]})


# What is wrong, and the words the message must hold (besides the file's path).
BAD_STATE = [
    (b"\xff\xfe{not utf-8", "not UTF-8 text (byte 0xff at offset 0)"),
    (b"\x00" * 64, "not JSON"),
    (b'{"version": 1, "quotas": [', "not JSON"),
    (NESTED_200_000.encode(), "JSON nested deeper than the decoder follows"),
    ('{"version": 1, "quotas": [' + "[" * 200_000, "JSON nested deeper than the decoder follows"),
    (b"[]", "the file must be an object, got a JSON array"),
    (b'{"version": 1}', "the file has no quotas"),
    (b'{"version": true, "quotas": []}', "version True, expected 1"),
    (b'{"version": 2, "quotas": []}', "version 2, expected 1"),
    (b'{"version": 1, "quotas": {}}', "quotas must be a list"),
    (b'{"version": 1, "quotas": [], "extra": 1}', "unknown key 'extra'"),
    (b'{"version": 1, "quotas": ["alice"]}', "quotas[0] must be an object, got 'alice'"),
    (entry(), "quotas[0] has no values"),
    (entry(values=[]), "quotas[0].values must be an object"),
    (entry(values={}, clientid="x"), "quotas[0] has an unknown key 'clientid'"),
    (entry(user=5, values={}), "quotas[0].user must be a string or null, got 5"),
    (entry(user=["a"], values={}), "quotas[0].user must be a string or null, got a JSON array"),
    (entry(user=None, values={"producer_byte_rate": 1}), "quotas[0]: Invalid empty client quota entity"),
    (entry(user="", values={"producer_byte_rate": 1}), "quotas[0]: Empty user not supported"),
    (entry(user="n" * 32_768, values={}), "string field user name had invalid length 32768"),
    ('{"version": 1, "quotas": [{"user": "\\ud800", "values": {}}]}', "quotas[0].user is not valid Unicode"),
    (entry(values={"producer_byte_rate": "1"}), "quotas[0].values['producer_byte_rate'] must be a number or null"),
    (entry(values={"producer_byte_rate": True}), "must be a number or null, got True"),
    (entry(values={"producer_byte_rate": {"a": 1}}), "must be a number or null, got a JSON object"),
    (entry(values={"producer_byte_rate": 0}), "quotas[0]: Quota producer_byte_rate must be greater than 0"),
    (entry(values={"producer_byte_rate": 1.5}), "quotas[0]: producer_byte_rate cannot be a fractional value."),
    (entry(values={"producer_byte_rate": int("9" * 400)}), "is too large for a LONG."),
    (entry(values={"request_percentage": 1e400}), "request_percentage must be a finite number, got inf"),
    (entry(values={"request_percentage": float("nan")}), "request_percentage must be a finite number, got nan"),
    (entry(values={"bogus_rate": 1}), "quotas[0]: Invalid configuration key bogus_rate"),
    (entry(values={"bogus_rate": None}), "quotas[0].values: unknown quota key 'bogus_rate'"),
    (entry(values={"connection_creation_rate": 5}), "quotas[0]: Invalid configuration key connection_creation_rate"),
    (entry(client_id="a", client_id_prefix="b", values={}), "client-id and client-id-prefix cannot be combined"),
    (entry(user=None, ip="0:0::1", values={}), "quotas[0].ip '0:0::1' must be an address in its short form (::1)"),
    (entry(ip="::1", values={}), "quotas[0]: Invalid quota entity combination, IP entity should"),
    (entry(user=None, ip="kafka.example", values={}), "kafka.example is not a valid IP address"),
    (
        json.dumps({"version": 1, "quotas": [{"user": "u", "values": {}}, {"user": "u", "values": {}}]}),
        "quotas[1] names the same entity as quotas[0]",
    ),
]


@pytest.mark.parametrize(("content", "words"), BAD_STATE, ids=[words for _, words in BAD_STATE])
def test_a_state_file_the_proxy_cannot_take_is_refused_naming_the_file_and_the_entry(
    tmp_path: Path, content: bytes | str, words: str
) -> None:
    path = tmp_path / "quotas.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(ConfigError) as refused:
        load_state(path)
    assert refused.value.key == "admin.state_file"
    assert str(path) in refused.value.problem and words in refused.value.problem, refused.value.problem
    assert "correct it, or move it away" in refused.value.problem, "the message says what to do"


@pytest.mark.parametrize(("content", "words"), [BAD_STATE[0], BAD_STATE[3], BAD_STATE[17]])
def test_run_and_check_config_exit_2_naming_the_state_file_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str, words: str
) -> None:
    state = tmp_path / "quotas.json"
    state.write_bytes(content.encode() if isinstance(content, str) else content)
    config = tmp_path / "quotagate.toml"
    config.write_text(f'[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n[admin]\nstate_file = "{state}"\n')
    for command in (["run", "--config", str(config)], ["check-config", str(config)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert f"quotagate: bad configuration: admin.state_file: {state}" in err and words in err, err
        assert "Traceback" not in err


def test_what_the_proxy_writes_it_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "quotas.json"
    save_state(path, SEED_QUOTAS)
    assert load_state(path) == SEED_QUOTAS
    assert load_state(tmp_path / "none-yet.json") == {}


def assert_state_is_clean(path: Path) -> None:
    """The one promise: the file loads as quotas AlterClientQuotas could have set, or is refused
    with a ConfigError naming it. Nothing else escapes."""
    try:
        quotas = load_state(path)
    except ConfigError as exc:
        assert exc.key == "admin.state_file" and str(path) in exc.problem
        return
    for entity, values in quotas.items():
        ops = tuple(QuotaOp(key.value, value or 0.0, value is None) for key, value in values.items())
        assert check_alteration(Alteration(entity_parts(entity), ops)) == (entity, None)
        assert all(value is None or math.isfinite(value) for value in values.values())
    save_state(path, quotas)
    assert load_state(path) == quotas, "what was taken is written back as it was read"


def mutated(seed: bytes) -> st.SearchStrategy[bytes]:
    """The seed cut, with bytes overwritten, with a tail of garbage, or bytes inserted."""
    where = st.floats(0, 1)

    def at(fraction: float) -> int:
        return int(fraction * len(seed))

    def flip(flips: list[tuple[float, int]]) -> bytes:
        out = bytearray(seed)
        for fraction, value in flips:
            out[min(at(fraction), len(out) - 1)] = value
        return bytes(out)

    cut = st.builds(lambda f: seed[: at(f)], where)
    flipped = st.builds(flip, st.lists(st.tuples(where, st.integers(0, 255)), min_size=1, max_size=6))
    tailed = st.builds(lambda f, tail: seed[: at(f)] + tail, where, st.binary(max_size=40))
    inserted = st.builds(lambda f, blob: seed[: at(f)] + blob + seed[at(f) :], where, st.binary(min_size=1, max_size=8))
    return st.one_of(cut, flipped, tailed, inserted, st.binary(max_size=200))


# JSON values no state or levels file holds: every kind, huge and non-finite numbers, odd strings.
HOSTILE_NUMBERS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63, 2**63 - 1, 1e-300, -0.0, 10**399]),
)
HOSTILE_STRINGS = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", DEFAULT, "\ud800", "0:0::1", "::1", "producer_byte_rate", "user", "x" * 5000]),
)
HOSTILE_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), HOSTILE_NUMBERS, HOSTILE_STRINGS),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(HOSTILE_STRINGS, children, max_size=4)),
    max_leaves=12,
)


def replaced_somewhere(document: Any, path: list[int], value: Any) -> Any:
    """`document` with the node `path` picks (each step an index into a container's items, modulo
    their number) replaced by `value`; a step into a container adds `value` as a new key there."""
    if not path:
        return value
    step, rest = path[0], path[1:]
    if isinstance(document, list) and document:
        copy = list(document)
        copy[step % len(copy)] = replaced_somewhere(copy[step % len(copy)], rest, value)
        return copy
    if isinstance(document, dict) and document:
        copy = dict(document)
        keys = list(copy)
        if step % (len(keys) + 1) == len(keys):
            copy[f"k{step}"] = value
        else:
            key = keys[step % (len(keys) + 1)]
            copy[key] = replaced_somewhere(copy[key], rest, value)
        return copy
    return value


def hostile_documents(seed: Any) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda path, value: json.dumps(replaced_somewhere(seed, path, value)).encode("utf-8", "surrogatepass"),
        st.lists(st.integers(0, 20), max_size=5),
        HOSTILE_JSON,
    )


def damaged(data: st.DataObject, seed: bytes, path: Path) -> Path:
    """`path`, holding the seed file mutated, or with a hostile JSON value somewhere in it."""
    path.write_bytes(data.draw(st.one_of(mutated(seed), hostile_documents(json.loads(seed)))))
    return path


@FILE_FUZZ
@given(data=st.data())
def test_any_bytes_in_the_state_file_load_as_alter_client_quotas_would_or_are_refused_naming_it(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("state")
    assert_state_is_clean(damaged(data, seed_state(directory), directory / "quotas.json"))


# The bucket levels beside the state file ----------------------------------------------------


def seed_levels(directory: Path) -> bytes:
    save_levels(directory / "seed.buckets.json", SEED_LEVELS, saved_at=1_795_600_000.5)
    return (directory / "seed.buckets.json").read_bytes()


def levels_document(tokens: str = "-4000.0", saved_at: str = "1795600000.5", bucket_id: str | None = None) -> str:
    bucket_id = bucket_id or '["producer_byte_rate", "user", "alice", null]'
    return f'{{"version": 1, "saved_at": {saved_at}, "buckets": [{{"id": {bucket_id}, "tokens": {tokens}}}]}}'


BAD_LEVELS = [
    (NESTED_200_000, "JSON nested deeper than the decoder follows"),
    ('{"version": 1, "saved_at": 1, "buckets": [' + "{" * 200_000, "not JSON"),
    ("\udcff", "not UTF-8 text"),
    (levels_document(tokens="9" * 400), "buckets[0].tokens is out of range (400 digits)"),
    (levels_document(tokens="-" + "9" * 400), "buckets[0].tokens is out of range (400 digits)"),
    (levels_document(tokens="NaN"), "buckets[0].tokens must be a finite number, got nan"),
    (levels_document(tokens="-Infinity"), "buckets[0].tokens must be a finite number, got -inf"),
    (levels_document(tokens="1e400"), "buckets[0].tokens must be a finite number, got inf"),
    (levels_document(tokens='"NaN"'), "buckets[0].tokens must be a number, got 'NaN'"),
    (levels_document(tokens="true"), "buckets[0].tokens must be a number, got True"),
    (levels_document(saved_at="Infinity"), "saved_at must be a finite number, got inf"),
    (levels_document(bucket_id="[]"), "buckets[0].id must be [key, scope, name or null, name or null], got a JSON"),
    (levels_document(bucket_id='["a", "b", 1, null]'), "buckets[0].id must be [key, scope"),
    (levels_document(bucket_id='["a", "b", ["c"], null]'), "buckets[0].id must be [key, scope"),
    (levels_document(bucket_id='["a", "b", "\\udc00", null]'), "buckets[0].id is not valid Unicode"),
    ('{"version": 1, "saved_at": 1, "buckets": {}}', "buckets must be a list"),
    ('{"version": 2, "saved_at": 1, "buckets": []}', "version 2, expected 1"),
    ('{"version": 1, "buckets": []}', "the file has no saved_at"),
    ("garbage", "not JSON"),
]


@pytest.mark.parametrize(("content", "words"), BAD_LEVELS, ids=[words[:40] for _, words in BAD_LEVELS])
def test_a_levels_file_the_proxy_cannot_take_says_why(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "quotas.buckets.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError) as refused:
        load_levels(path)
    assert words in str(refused.value), str(refused.value)


@pytest.mark.parametrize(("content", "words"), BAD_LEVELS[:5])
async def test_a_proxy_starts_with_an_unreadable_levels_file_and_counts_the_reset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, words: str
) -> None:
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'
    )
    state = tmp_path / "quotas.json"
    levels_path(state).write_bytes(content.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING, logger="quotagate.proxy"):
        proxy = Proxy(config, state_path=state)
    assert proxy.metrics.registry.get_sample_value("quotagate_bucket_levels_resets_total") == 1.0
    assert f"bucket levels not restored from {levels_path(state)}, every bucket starts full: {words}" in caplog.text
    assert proxy.engine.levels(proxy.loop.time()) == {}, "every bucket starts full"
    proxy.levels.save()  # the next save replaces the bad file with a good one
    assert load_levels(levels_path(state))[0] == {}
    fine = Proxy(config, state_path=state)
    assert fine.metrics.registry.get_sample_value("quotagate_bucket_levels_resets_total") == 0.0


@FILE_FUZZ
@given(data=st.data())
def test_any_bytes_in_the_levels_file_load_as_finite_levels_or_say_why(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("levels")
    try:
        levels, saved_at = load_levels(damaged(data, seed_levels(directory), directory / "quotas.buckets.json"))
    except ValueError:
        return
    assert math.isfinite(saved_at)
    for bucket_id, tokens in levels.items():
        assert len(bucket_id) == 4 and all(part is None or isinstance(part, str) for part in bucket_id)
        assert isinstance(tokens, float) and math.isfinite(tokens)
