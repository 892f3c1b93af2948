"""Client ids are chosen by tenants: whatever one contains, the pipeline's outputs stay valid for every
other tenant. quotas.toml reads back (tomllib and the proxy's own parser) to the same names,
kafka-configs.sh hands the tool each name as it is, and apply / promote edit the proxy's file the same
way whatever the names in it. (The report: test_report.py.)"""

from __future__ import annotations

import math
import os
import subprocess
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotagate.config import parse_config
from quotagate.pipeline.apply import BEGIN, END, applied_entities, apply_shadow, promote, shadow_recommendations
from quotagate.pipeline.recommend import to_kafka_configs, to_toml
from quotagate.quotas import ANONYMOUS, DEFAULT, QuotaEntity, QuotaKey

# What breaks naive writers: astral characters (an emoji is a surrogate pair in JSON's escapes, which
# TOML refuses), quotes, backslashes, newlines, control characters, the apply block's own markers,
# TOML and shell syntax.
HOSTILE = [
    "emoji-\U0001f600",
    "\U00010348\U0001d11e",
    'quote"d',
    "back\\slash",
    "new\nline",
    '\r\n[[quotas]]\nclient_id = "x"',
    "bell\x07esc\x1b[31mdel\x7f",
    END,
    BEGIN + " (shadow)",
    f"x\n{END}\n",
    "shadow = true",
    "$(touch /tmp/quotagate-pwned)`id`;'\"",
    "tab\there",
    "\u2028\u2029",
    f"\u2028{END}\u2029",  # str.splitlines() splits there, TOML does not
    f"\x85{END}\x85",
    "-leading-dash",
    "ünïcödé-名前",
]
CONFIG = '[proxy]\nbootstrap_servers = ["127.0.0.1:9092"]\n'


def recommendations(entities: list[tuple[str, str]], value: float = 1000.0) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "user": user,
                "client_id": client_id,
                "quota_key": "producer_byte_rate",
                "recommended": value,
                "met": True,
                "current": math.nan,
                "current_shadow": None,
            }
            for user, client_id in entities
        ]
    )


def entity(user: str, client_id: str) -> QuotaEntity:
    return QuotaEntity(None if user == ANONYMOUS else user, client_id)


def nameable(user: str, client_id: str) -> bool:
    """What the proxy's file can name: not an empty name, nor one spelled as its default entity."""
    names = [client_id] if user == ANONYMOUS else [user, client_id]
    return all(name not in ("", DEFAULT) for name in names)


names = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))
entity_lists = st.lists(st.tuples(st.one_of(st.just(ANONYMOUS), names), names), min_size=1, max_size=8, unique=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entity_lists)
def test_quotas_toml_reads_back_every_client_id_with_tomllib_and_the_proxys_parser(entities) -> None:
    text = to_toml(recommendations(entities))
    data = tomllib.loads(text)  # valid TOML, whatever the names
    written = {(e.get("user", ANONYMOUS), e["client_id"]) for e in data.get("quotas", [])}
    assert written == {e for e in entities if nameable(*e)}
    quotas = dict(parse_config(CONFIG + text).quotas.items())
    assert set(quotas) == {entity(*e) for e in entities if nameable(*e)}
    assert all(values == {QuotaKey.PRODUCER_BYTE_RATE: 1000.0} for values in quotas.values())
    assert text.count("# not written: ") == sum(not nameable(*e) for e in entities)


def test_an_astral_client_id_is_written_as_itself() -> None:
    text = to_toml(recommendations([(ANONYMOUS, "emoji-\U0001f600"), ("alice", "\U0001d11e")]))
    assert [e["client_id"] for e in tomllib.loads(text)["quotas"]] == ["emoji-\U0001f600", "\U0001d11e"], text


def test_client_ids_pandas_would_take_for_one_stay_two() -> None:
    # pandas' groupby hashes strings as C strings: "" and "\0" fell into one group
    text = to_toml(recommendations([(ANONYMOUS, "\0"), (ANONYMOUS, "")]))
    assert [e["client_id"] for e in tomllib.loads(text)["quotas"]] == ["\0"], text


def test_names_the_proxys_file_cannot_carry_are_left_out_and_said() -> None:
    # "<default>" is the default entity in the proxy's file, and it refuses an empty name: a tenant
    # calling itself that must not get (or break) everyone's quota
    text = to_toml(recommendations([(ANONYMOUS, DEFAULT), (ANONYMOUS, ""), ("", "c"), ("bob", "ok")]))
    assert [e["client_id"] for e in tomllib.loads(text)["quotas"]] == ["ok"]
    assert text.count("# not written: ") == 3, text
    tried, skipped = shadow_recommendations(
        recommendations([(ANONYMOUS, DEFAULT), (ANONYMOUS, ""), ("bob", "ok")]), CONFIG
    )
    assert list(tried["client_id"]) == ["ok"]
    assert sorted(s.why.split(":")[0] for s in skipped) == [
        "its client id is empty",
        "its client id is spelled <default>, which the proxy's file reads as the default entity",
    ]


@pytest.fixture(scope="module")
def fake_kafka_configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kafka-configs.sh that writes the arguments it was given, each ended by a NUL, after a
    `--call` of its own (no argument can hold a NUL)."""
    folder = tmp_path_factory.mktemp("bin")
    tool = folder / "kafka-configs.sh"
    tool.write_text('#!/bin/sh\nprintf "%s\\0" --call "$@"\n')
    tool.chmod(0o755)
    return folder


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entity_lists)
def test_kafka_configs_sh_hands_every_name_to_the_tool_as_it_is(fake_kafka_configs: Path, entities) -> None:
    script = to_kafka_configs(recommendations(entities), bootstrap="k:9092")
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PATH": f"{fake_kafka_configs}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout.decode("utf-8").removesuffix("\0")
    calls = output.split("\0--call\0") if output else []
    given_names = set()
    for call in calls:
        values = call.removeprefix("--call\0").split("\0")
        names = [values[i + 1] for i, a in enumerate(values) if a == "--entity-name"]
        given_names.add((ANONYMOUS, names[0]) if len(names) == 1 else (names[0], names[1]))
        assert values[values.index("--add-config") + 1] == "producer_byte_rate=1000"
    # the tool cannot be given a NUL (no argument can carry one) or an empty name (it reads that as
    # the default entity): those are comments saying so
    carried = {e for e in entities if "\0" not in "".join(e) and e[1] != "" and e[0] != ""}
    assert given_names == carried
    comments = [line for line in script.split("\n") if line.startswith("# not written: ")]
    assert len(comments) == len(entities) - len(carried)


@settings(max_examples=60, deadline=None)
@given(entity_lists, entity_lists)
def test_apply_twice_and_promote_whatever_the_client_ids_contain(first, second) -> None:
    once = apply_shadow(CONFIG, shadow_recommendations(recommendations(first), CONFIG)[0])
    again = apply_shadow(once, shadow_recommendations(recommendations(second, 2000.0), once)[0])
    applied = applied_entities(again)
    assert set(applied) == {entity(*e) for e in second if nameable(*e)}
    assert all(values == {QuotaKey.PRODUCER_BYTE_RATE: 2000.0} for values in applied.values())
    quotas = parse_config(again).quotas
    assert set(quotas.shadow) == set(applied) and set(dict(quotas.items())) == set(applied)
    promoted, count = promote(again)
    assert count == len(applied)
    assert not parse_config(promoted).quotas.shadow and set(applied_entities(promoted)) == set(applied)
    assert promote(promoted)[0] == promoted, "promoting again changes nothing"


# Tenant names are the operator's (the proxy's parser takes any non-empty name of at most 128
# characters): apply finds each entry by its name and writes only numbers into it, and the block
# names the tenants it made shadow as escaped JSON, so no name can make a line or a marker of its own.
tenant_names = st.lists(
    st.one_of(st.sampled_from([name for name in HOSTILE if name]), st.text(min_size=1, max_size=40)),
    min_size=1,
    max_size=5,
    unique=True,
)


@settings(max_examples=40, deadline=None)
@given(tenant_names)
def test_apply_and_promote_find_every_tenant_by_its_name_whatever_it_contains(names) -> None:
    from quotagate.config.reference import toml_value
    from quotagate.pipeline.apply import shadow_tenants

    entries = "".join(f'\n[[tenants]]\nname = {toml_value(name)}\nusers = ["u{i}"]\n' for i, name in enumerate(names))
    config = CONFIG + entries
    found = pd.DataFrame(
        [
            {"user": None, "client_id": None, "tenant": name, "quota_key": "producer_byte_rate"}
            | {"recommended": 1000.0 * (i + 1), "met": True}
            for i, name in enumerate(names)
        ]
    )
    applied = apply_shadow(config, found)
    tenants = parse_config(applied).tenants.by_name
    assert set(tenants) == set(names)
    assert all(
        tenants[name].shadow and tenants[name].quotas[QuotaKey.PRODUCER_BYTE_RATE] == 1000.0 * (i + 1)
        for i, name in enumerate(names)
    )
    assert sorted(shadow_tenants(applied)) == sorted(names)
    promoted, count = promote(applied)
    assert count == len(names) and not any(tenant.shadow for tenant in parse_config(promoted).tenants.tenants)
