"""The usage records' fields, stated once: name, type, meaning per schema version, and what they are.

Everything else is derived from FIELDS: the Parquet schemas of both versions (usage_parquet.py), the
rows and columns the sinks write (usage.py), the pipeline's Spark schemas (pipeline/schema.py), the
field tables of docs/usage-records.md, and the generated sections of the compiled collectors
(usage_collectors.py and its .pxd: the aggregate's counters as C fields, the v2 columns, the v1 JSON
line), which `make docs` writes (`python -m quotagate.proxy.usage_fields`) and a test keeps fresh.

A field is in a version when it has a meaning there. Its position is its place in FIELDS, whatever
the version (files are read by name). A field is only ever added to a version: a rename or a removal
bumps the version.

Standard library only, and no quotagate import beyond the recorded quota keys (quotas/apis.py, whose
table of APIs states them): the compiled collectors, the pipeline (on Spark executors too) and the
docs generator all import it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quotagate.quotas.apis import RECORDED_KEYS

REQUEST_SCHEMA_VERSION = 1  # one record per request
AGGREGATE_SCHEMA_VERSION = 2  # one record per interval and key
VERSIONS = (REQUEST_SCHEMA_VERSION, AGGREGATE_SCHEMA_VERSION)

# A field's type, as written: Parquet's and Arrow's, Spark's and JSON's follow from it.
INT32, INT64, DOUBLE, STRING, BOOL, STRINGS = "int32", "int64", "double", "string", "bool", "string[]"
# What a field is: who and when (identity), what was measured (measure), or the quota in force then.
IDENTITY, MEASURE, QUOTA = "identity", "measure", "quota"


@dataclass(frozen=True)
class UsageField:
    name: str
    type: str
    v2: str | None  # its meaning in v2 rows (markdown), None: not a v2 field
    v1: str | None  # its meaning in v1 rows
    role: str = MEASURE
    # The versions to which it was added after their first files: null where older files lack it.
    later: tuple[int, ...] = ()
    # v2 measures: the C type the aggregate sums it in (usage_collectors.Counters); a "double" sum
    # of an int64 field is written rounded (a produce's bytes split over its topics).
    summed_as: str | None = None

    def in_version(self, version: int) -> bool:
        return (self.v2 if version == AGGREGATE_SCHEMA_VERSION else self.v1) is not None

    def meaning(self, version: int) -> str:
        meaning = self.v2 if version == AGGREGATE_SCHEMA_VERSION else self.v1
        assert meaning is not None, f"{self.name} is not a v{version} field"
        return meaning


AS_IN_V2 = "as in v2"


def _quotas_per_key(prefix: str, value: tuple[str, str], shadow: tuple[str, str]) -> list[UsageField]:
    """Per recorded key, `<prefix><key>` (the quota in force) and `<prefix><key>_shadow` (whether it
    was shadow), each with its (v2, v1) meanings; added later to both versions."""
    fields = []
    for key in RECORDED_KEYS:
        fields.append(UsageField(f"{prefix}{key.value}", DOUBLE, *value, QUOTA, later=VERSIONS))
        fields.append(UsageField(f"{prefix}{key.value}_shadow", BOOL, *shadow, QUOTA, later=VERSIONS))
    return fields


def _quota_fields() -> tuple[UsageField, ...]:
    """Per recorded key, the quota in force and whether its entry was shadow; then the windows."""
    value = (
        "the quota in force for the entity in this interval, per key (`quota_<key>`), in the key's unit (bytes/s, "
        "percent of one thread, partitions/s): the file's and the Admin API's (kafka-configs.sh) alike. Null when "
        "the key is unlimited for the entity, or when the row's API is not charged to that key"
    )
    shadow = (
        "whether that quota was a shadow entry (`shadow = true`: tried, never applied). Null for a key the row's "
        "API is not charged to; false for a charged key without a quota"
    )
    windows = (
        "the windows that sized the quotas' bursts then (the proxy's `quota_window_*` settings), so that a replay "
        "from the records alone gives a quota the proxy's burst"
    )
    fields = _quotas_per_key(
        "quota_",
        (value, "as in v2: the quota in force when the record was made (its `ts`)"),
        (shadow, "as in v2: whether it was shadow"),
    )
    for name, kind in (
        ("quota_window_num", INT32),
        ("quota_window_size_seconds", DOUBLE),
        ("controller_quota_window_num", INT32),
        ("controller_quota_window_size_seconds", DOUBLE),
    ):
        fields.append(UsageField(name, kind, windows, "as in v2: the windows then", QUOTA, later=VERSIONS))
    return tuple(fields)


def _tenant_fields() -> tuple[UsageField, ...]:
    """The entity's tenant (docs/quotas.md "Tenants") and, per recorded key, the tenant's quota in force
    and whether it was shadow."""
    tenant = (
        "the tenant (`[[tenants]]`) whose members include the entity when the row was made; null when it is in "
        "no tenant"
    )
    value = (
        "the tenant's quota in force in this interval, per key (`tenant_quota_<key>`): one bucket shared by all "
        "its members, held together with the entity's own `quota_<key>` (whichever binds first). Null when the "
        "entity is in no tenant, the tenant has no quota for the key, or the row's API is not charged to that key"
    )
    shadow = (
        "whether the tenant's quotas were shadow (its entry's `shadow = true`: tried, never applied). Null when "
        "the entity is in no tenant or the row's API is not charged to the key; false for a charged key the "
        "tenant has no quota for"
    )
    return (
        UsageField("tenant", STRING, tenant, "as in v2: the tenant when the record was made", IDENTITY, later=VERSIONS),
        *_quotas_per_key(
            "tenant_quota_",
            (value, "as in v2: the tenant's quota in force when the record was made"),
            (shadow, "as in v2: whether the tenant's quota was shadow"),
        ),
    )


FIELDS: tuple[UsageField, ...] = (
    UsageField(
        "v", INT32,
        "2. A field is only ever added to a version; renames and removals bump it",
        "1", IDENTITY,
    ),
    UsageField(
        "ts", INT64,
        "epoch ms (UTC): the start of the interval. A request counts in the interval in which it was charged: a "
        "produce when the proxy read it (the response time less its upstream latency), every other request when "
        "its response was back",
        "epoch ms (UTC) when the response left the proxy, or when the request was read for acks=0 produce",
        IDENTITY,
    ),
    UsageField("interval_ms", INT32, "the interval's length (`usage.interval_seconds`)", None, IDENTITY),
    UsageField("proxy", STRING, "`usage.proxy_id`, default the host name", AS_IN_V2, IDENTITY),
    UsageField(
        "writer", STRING,
        "the proxy process (proxy id, pid, start ms): rows are unique by (`writer`, `seq`); the pipeline "
        "deduplicates on them",
        AS_IN_V2, IDENTITY, later=(REQUEST_SCHEMA_VERSION,),
    ),
    UsageField(
        "seq", INT64, "the writer's row number", AS_IN_V2, IDENTITY, later=(REQUEST_SCHEMA_VERSION,),
    ),
    UsageField(
        "user", STRING, "the principal (`ANONYMOUS` without SASL)", AS_IN_V2, IDENTITY,
    ),
    UsageField(
        "client_id", STRING, "the request header's client id (`\"\"` when null)", AS_IN_V2, IDENTITY,
    ),
    UsageField(
        "api_key", INT32, "the Kafka API (0 Produce, 1 Fetch, 3 Metadata, 19 CreateTopics, …)", AS_IN_V2, IDENTITY,
    ),
    UsageField("api_version", INT32, None, "the request's version", IDENTITY),
    UsageField(
        "topic", STRING,
        "produce: the topic, or `<other topics>` (not a name Kafka accepts for a topic): the entity's topics "
        "beyond `usage.topics_per_entity` in the interval, and names over 249 characters, summed; every other "
        "API: `\"\"`",
        None, IDENTITY,
    ),
    UsageField(
        "topics", STRINGS, None,
        "produce: the topics written; topic mutations: the topics named; otherwise `[]`", IDENTITY,
    ),
    UsageField("requests", INT64, "requests in the interval", None, summed_as="long long"),
    UsageField(
        "bytes_in", INT64,
        "request sizes (header + body: what `producer_byte_rate` charges), summed",
        "the request's size", summed_as="double",
    ),
    UsageField(
        "bytes_out", INT64,
        "response sizes (what `consumer_byte_rate` charges), summed",
        "the response's size (0 when there is no response)", summed_as="long long",
    ),
    UsageField(
        "request_time_ms", DOUBLE,
        "upstream latency summed over the requests the broker answered", None, summed_as="double",
    ),
    UsageField(
        "upstream_latency_ms", DOUBLE, None,
        "from forwarding the request to the broker's response; −1 when the proxy answered itself",
    ),
    UsageField(
        "throttle_ms", INT64,
        "throttle the proxy added, summed",
        "the throttle the proxy added (the client's `throttle_time_ms` is at least this)", summed_as="long long",
    ),
    UsageField("throttle_ms_max", INT64, "the largest throttle the proxy added", None, summed_as="long long"),
    UsageField("throttled_requests", INT64, "requests given a throttle", None, summed_as="long long"),
    UsageField(
        "refusals", INT64, "requests refused whole or in part (thresholds, mutation quota)", None,
        summed_as="long long",
    ),
    UsageField(
        "partitions_mutated", INT64,
        "partitions charged to `controller_mutation_rate`",
        "partitions charged, before refunds of topics the broker rejected", summed_as="long long",
    ),
    UsageField("decision", STRING, None, "`ok`, `throttled`, `partially_refused`, `refused`"),
    UsageField(
        "throttled_bytes", INT64,
        "bytes of the produce requests whose charge to `producer_byte_rate` left the entity over its quota (in "
        "debt: answered with a throttle, then muted). ÷ the quota: the time the quota held the entity at it, the "
        "throttle measure the what-if replay reproduces (docs/pipeline.md)",
        "produce: `bytes_in` if its charge left the entity over its `producer_byte_rate`, else 0",
        later=VERSIONS, summed_as="double",
    ),
    UsageField(
        "first_ms", INT64,
        "epoch ms when the row's first request was charged", None, later=(AGGREGATE_SCHEMA_VERSION,),
        summed_as="double",
    ),
    UsageField(
        "last_ms", INT64,
        "epoch ms when the row's last request was charged", None, later=(AGGREGATE_SCHEMA_VERSION,),
        summed_as="double",
    ),
    UsageField(
        "charge_offset_ms", DOUBLE,
        "the row's requests' charge times less `ts`, summed (÷ `requests`: their mean offset in the interval)",
        None, later=(AGGREGATE_SCHEMA_VERSION,), summed_as="double",
    ),
    UsageField(
        "shadow_throttle_ms", INT64,
        "the time shadow quotas (`shadow = true`) would have held the entity at their rate (what the requests' "
        "charges put below zero ÷ the rate), summed; never applied",
        "the time shadow quotas (`shadow = true`) would have held the entity at their rate for this request's "
        "charges; never applied",
        summed_as="long long",
    ),
    *_quota_fields(),
    *_tenant_fields(),
)  # fmt: skip

BY_NAME = {field.name: field for field in FIELDS}


def fields_of(version: int) -> tuple[UsageField, ...]:
    """The fields of `version`'s rows, in the order files and lines hold them."""
    return tuple(field for field in FIELDS if field.in_version(version))


def names_of(version: int) -> tuple[str, ...]:
    return tuple(field.name for field in fields_of(version))


# The counters an aggregate keeps per key (usage_collectors.Counters), in this order.
AGGREGATE_COUNTERS = tuple(field.name for field in fields_of(AGGREGATE_SCHEMA_VERSION) if field.summed_as)
# The quota fields, in order, and the value fields among them.
QUOTA_FIELDS = tuple(field.name for field in FIELDS if field.role == QUOTA)
QUOTA_VALUE_FIELDS = frozenset(f"quota_{key.value}" for key in RECORDED_KEYS)
WINDOW_FIELDS = tuple(name for name in QUOTA_FIELDS if "window" in name)
TENANT_QUOTA_FIELDS = tuple(f"tenant_quota_{key.value}" for key in RECORDED_KEYS)
# The fields resolved from the quota table in force when rows are made (the quota fields and the
# tenant), once per entity and table: the last fields of FIELDS, the tail of a v1 JSON line.
RESOLVED_FIELDS = tuple(field.name for field in FIELDS if field.role == QUOTA or field.name == "tenant")
assert names_of(REQUEST_SCHEMA_VERSION)[-len(RESOLVED_FIELDS) :] == RESOLVED_FIELDS
# v2 fields added after its first files (null in files without them).
V2_ADDED = tuple(field.name for field in fields_of(AGGREGATE_SCHEMA_VERSION) if AGGREGATE_SCHEMA_VERSION in field.later)


# The docs' field tables ----------------------------------------------------------------------------------
TYPE_WORDS = {INT32: "int", INT64: "int64", DOUBLE: "double", STRING: "string", BOOL: "bool", STRINGS: "string[]"}


def fields_markdown(version: int) -> str:
    """The table of `version`'s fields for docs/usage-records.md: one row per meaning (the fields that
    share it together, at the first one's place), saying which were added after the version's first
    files (the quota fields' prose says it of them)."""
    rows: dict[str, tuple[list[str], list[str]]] = {}
    for field in fields_of(version):
        meaning = field.meaning(version)
        if version in field.later and field.role != QUOTA:
            meaning += " (added later: null in older records)"
        names, types = rows.setdefault(meaning, ([], []))
        names.append(f"`{field.name}`")
        if TYPE_WORDS[field.type] not in types:
            types.append(TYPE_WORDS[field.type])
    lines = ["| field | type | meaning |", "| --- | --- | --- |"]
    lines += [f"| {', '.join(names)} | {', '.join(types)} | {meaning} |" for meaning, (names, types) in rows.items()]
    return "\n".join(lines) + "\n"


# The generated sections -----------------------------------------------------------------------------------
# Sections between these lines are written by `make docs` from FIELDS (a test says when one is stale).
BEGIN = "generated by `make docs` from usage_fields.FIELDS: edit it, not this"
END = "end of the generated section"
ROOT = Path(__file__).resolve().parents[2]


def _counters_pxd() -> str:
    lines = ["cdef class Counters:"]
    lines += [f"    cdef public {field} {name}" for name, field in _summed()]
    return "\n".join(lines) + "\n"


def _summed() -> list[tuple[str, str]]:
    return [(field.name, field.summed_as) for field in fields_of(AGGREGATE_SCHEMA_VERSION) if field.summed_as]


def _written(name: str, value: str) -> str:
    """How a summed counter is written: a double sum of an int64 field whole, a double to the µs."""
    field = BY_NAME[name]
    if field.summed_as != "double":
        return value
    return f"round({value})" if field.type == INT64 else f"round({value}, 3)"


def _counters_py() -> str:
    names = [name for name, _ in _summed()]
    starts = {"first_ms": "charged_ms", "last_ms": "charged_ms"}
    body = ["class Counters:", '    """One aggregate row\'s counters (AGGREGATE_COUNTERS, in order: `values`)."""', ""]
    body.append("    def __init__(self, charged_ms: float) -> None:")
    for name, summed in _summed():
        body.append(f"        self.{name} = {starts.get(name, '0.0' if summed == 'double' else '0')}")
    body += ["", "    def values(self) -> list:", "        return ["]
    body += [f"            self.{name}," for name in names]
    body += ["        ]", ""]
    body += [
        "    def written(self) -> list:",
        '        """values() as rows carry them: a double sum whole, or to the µs."""',
    ]
    body += ["        return ["]
    body += [f"            {_written(name, 'self.' + name)}," for name in names]
    body += ["        ]", ""]
    body += [
        "    def __eq__(self, other: object) -> bool:",
        "        return isinstance(other, Counters) and self.values() == other.values()",
        "",
        "    def __repr__(self) -> str:",
        '        return f"Counters({self.values()})"',
        "",
        "",
        "def aggregate_columns(items: list, interval_ms: int) -> tuple:",
        '    """The columns of AggregateCollector.take_aggregates\' items: ts, user, client_id, api_key, topic,',
        '    and one list per counter in AGGREGATE_COUNTERS\' order, valued as Counters.written writes them."""',
        "    ts = []",
        "    users = []",
        "    client_ids = []",
        "    api_keys = []",
        "    topics = []",
    ]
    body += [f"    {name} = []" for name in names]
    body += ["    for (interval, user, client_id, api_key, topic), counters in items:"]
    body += [
        "        ts.append(interval * interval_ms)",
        "        users.append(user)",
        "        client_ids.append(client_id)",
        "        api_keys.append(api_key)",
        "        topics.append(topic)",
    ]
    body += [f"        {name}.append({_written(name, 'counters.' + name)})" for name in names]
    body += [
        "    return (",
        "        ts,",
        "        users,",
        "        client_ids,",
        "        api_keys,",
        "        topics,",
    ]
    body += ["        ["]
    body += [f"            {name}," for name in names]
    body += ["        ],", "    )", "", ""]  # ruff's blank lines before the next class's leading comment
    return "\n".join(body) + "\n"


def _aggregate_columns_pxd() -> str:
    names = ", ".join(f"{name}=list" for name, _ in _summed())
    return (
        "@cython.locals(ts=list, users=list, client_ids=list, api_keys=list, topics=list, counters=Counters,\n"
        + "\n".join(f"               {line}" for line in _wrap(names + ")", 100))
        + "\ncpdef tuple aggregate_columns(list items, long interval_ms)\n"
    )


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for part in text.split(" "):
        if line and len(line) + 1 + len(part) > width:
            lines.append(line)
            line = part
        else:
            line = f"{line} {part}" if line else part
    return [*lines, line]


# v1 JSON lines: every field's text per row; usage_collectors.request_lines keeps what rows share.
V1_CACHED = ("user", "client_id", "api_key", "api_version")  # with the quota state: one text per combination
V1_VALUE_TEXTS = {"topics": "topics_text", "decision": "decision_text"}  # one text per value
V1_EXPRESSIONS = {  # the text of a field whose text is not made from its column the usual way
    "ts": "ts",
    "seq": "int_text(first_seq + i)",
    "throttled_bytes": "int_text(bytes_in_col[i] if over_quota_col[i] else 0)",
}


def _v1_text(field: UsageField) -> str:
    """The expression of a v1 field's JSON text inside request_lines' loop."""
    if field.name in V1_EXPRESSIONS:
        return V1_EXPRESSIONS[field.name]
    if field.name in V1_VALUE_TEXTS:
        return V1_VALUE_TEXTS[field.name]
    if field.name in ("proxy", "writer"):
        return f"{field.name}_text"
    if field.type == DOUBLE:
        return f"milliseconds_text({field.name}_col[i])"
    assert field.type in (INT32, INT64), f"v1 field {field.name}: no JSON text for {field.type}"
    return f"int_text({field.name}_col[i])"


def _v1_line_py() -> str:
    """request_lines' append of one line: its fields in FIELDS' v1 order, the resolved fields' text last
    (`tail`), the fields of V1_CACHED as one text (`identity`)."""
    text = ""
    identity_placed = False
    for field in fields_of(REQUEST_SCHEMA_VERSION):
        if field.name in RESOLVED_FIELDS:
            break
        if field.name in V1_CACHED:
            if not identity_placed:
                text += "{identity}"
                identity_placed = True
            continue
        key = ("{" if not text else ",") + f'"{field.name}":'
        if field.name == "v":
            text += _literal(key) + str(REQUEST_SCHEMA_VERSION)
        else:
            text += _literal(key) + "{" + _v1_text(field) + "}"
    text += "{tail}"
    return "lines.append(\n" + "".join(f"    {_fstring(part)}\n" for part in _split_fstring(text, 96)) + ")\n"


def _fstring(inside: str) -> str:
    """An f-string of `inside`, quoted as ruff formats it (double quotes unless it holds one)."""
    return f"f'{inside}'" if '"' in inside else f'f"{inside}"'


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _split_fstring(text: str, width: int) -> list[str]:
    """`text` (an f-string's inside) cut between its replacement fields and literal runs, at most
    about `width` a part."""
    parts = re.findall(r"\{\{|\}\}|\{[^{}]*\}|[^{}]+", text)
    lines, line = [], ""
    for part in parts:
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return [*lines, line]


def _v1_identity_py() -> str:
    """The text request_lines makes once per (quota state, user, client_id, api_key, api_version)."""
    text = "".join(f',"{name}":{{json_text({name})}}' for name in V1_CACHED)
    return "identity = (\n" + "".join(f"    {_fstring(part)}\n" for part in _split_fstring(text, 80)) + ")\n"


SECTIONS: dict[str, dict[str, Callable[[], str]]] = {
    "quotagate/proxy/usage_collectors.py": {
        "counters": _counters_py,
        "v1 identity": _v1_identity_py,
        "v1 line": _v1_line_py,
    },
    "quotagate/proxy/usage_collectors_c.pxd": {"counters": _counters_pxd, "aggregate columns": _aggregate_columns_pxd},
    "docs/usage-records.md": {
        "v2 fields": lambda: fields_markdown(AGGREGATE_SCHEMA_VERSION),
        "v1 fields": lambda: fields_markdown(REQUEST_SCHEMA_VERSION),
    },
}


def _marker(path: str, text: str, name: str) -> str:
    if path.endswith(".md"):
        return f"<!-- {text} ({name}) -->"
    return f"# {text} ({name})"


def with_sections(path: str, text: str) -> str:
    """`text` (the file at `path`) with its generated sections written afresh, each indented as its
    first marker."""
    for name, make in SECTIONS[path].items():
        begin, end = _marker(path, BEGIN, name), _marker(path, END, name)
        pattern = re.compile(rf"^([ \t]*){re.escape(begin)}\n.*?^[ \t]*{re.escape(end)}\n", re.S | re.M)
        found = pattern.search(text)
        if found is None:
            raise ValueError(f"{path} has no generated section {name!r} (between {begin!r} and {end!r})")
        indent = found.group(1)
        generated = "".join(indent + line if line.strip() else line for line in make().splitlines(True))
        text = text[: found.start()] + f"{indent}{begin}\n{generated}{indent}{end}\n" + text[found.end() :]
    return text


def stale_sections(root: Path = ROOT) -> list[str]:
    """The files whose generated sections differ from what FIELDS generates."""
    return [path for path in SECTIONS if with_sections(path, (root / path).read_text()) != (root / path).read_text()]


def write_sections(root: Path = ROOT) -> None:
    for path in SECTIONS:
        file = root / path
        text = file.read_text()
        fresh = with_sections(path, text)
        if fresh != text:
            file.write_text(fresh)
            print(f"{path}: generated sections written", file=sys.stderr)


if __name__ == "__main__":
    write_sections()
