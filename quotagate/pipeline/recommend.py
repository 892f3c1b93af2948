"""recommend: per entity and quota key, the smallest candidate meeting an objective, plus headroom.

Objective (default): throttled in at most 1 % of active seconds (for a tenant or its member, beyond
those the other's quota throttles anyway: recommend). The recommendation is that
candidate × (1 + headroom), rounded up to three significant digits (byte rates to whole bytes); when
no candidate meets the objective, the largest one is taken and `met` is false. Written as the proxy's
TOML [[quotas]] and as kafka-configs.sh commands.

Beside each recommendation: the quota the entity had (as the records say, else the proxy's
--config), and at that quota what the replay predicts next to what the proxy recorded (seconds
throttled, time held at the quota) or, for a shadow quota, what it observed it would have done.
"""

from __future__ import annotations

import functools
import json
import math
import shlex

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from quotagate.config.reference import toml_data, toml_value
from quotagate.quotas import ANONYMOUS, DEFAULT, QuotaEntity, QuotaKey, QuotaTable
from quotagate.quotas.engine import tokens_per_second

INTEGER_KEYS = {QuotaKey.PRODUCER_BYTE_RATE.value, QuotaKey.CONSUMER_BYTE_RATE.value}


def recommend(whatif: DataFrame, objective: float = 0.01, headroom: float = 0.2) -> DataFrame:
    """whatif rows → one row per (user, client_id, quota_key) and per (tenant, quota_key): the candidate
    that meets the objective (`meets_at`), its throttled share, whether one met it, and the recommended
    quota; beside it the current quota and, at it, the replay's figures and the records'. An entity's
    rows have a null tenant, a tenant's a null user and client id (as whatif's).

    A tenant and its members are replayed together (whatif.replay_tenant): a candidate is judged by
    the share of active seconds it throttles beyond those the other side's quota, at its current
    value, throttles anyway (`throttled_share_without`, the what-if's row at no quota; null for an
    entity in no tenant, and then 0): a member its tenant holds half the time can still be given an
    own quota, and a tenant whose member's own quota holds it a tenant quota.

    One pass of window functions over the what-if rows (no join): a what-if not yet written runs its
    replay once."""
    if "tenant" not in whatif.columns:  # a what-if written before tenants
        whatif = whatif.withColumn("tenant", F.lit(None).cast("string")).withColumn("members", F.lit(None).cast("long"))
    owner = Window.partitionBy("tenant", "user", "client_id", "quota_key")  # nulls are one group
    first = functools.partial(F.first, ignorenulls=True)
    # A tenant member's (or a tenant's) row at no quota (quota null): what the other side throttles anyway
    without = first(F.when(F.col("quota").isNull(), F.col("throttled_share"))).over(owner)
    added = F.col("throttled_share") - F.coalesce(F.col("throttled_share_without"), F.lit(0.0))
    ranked = whatif.withColumn("throttled_share_without", without)
    ranked = ranked.withColumn("meets", F.col("quota").isNotNull() & (added <= objective)).select(
        "*",
        F.row_number()
        .over(
            owner.orderBy(
                F.col("quota").isNull(),  # a member's row at no own quota (whatif.replay_tenant): no candidate
                F.col("meets").desc(),
                F.when(F.col("meets"), F.col("quota")).otherwise(-F.col("quota")),
            )
        )
        .alias("rank"),
        *(first(name).over(owner).alias(f"_{name}") for name in CURRENT_COLUMNS),
        *(first(F.when(F.col("is_current"), F.col(name))).over(owner).alias(alias) for name, alias in AT_CURRENT),
    )
    return ranked.where(F.col("rank") == 1).select(
        "user",
        "client_id",
        "quota_key",
        "tenant",
        "members",
        F.col("quota").alias("meets_at"),
        F.col("throttled_share").alias("throttled_share_at"),
        "throttled_share_without",
        F.col("meets").alias("met"),
        "peak_second",
        "mean_rate",
        (F.col("quota") * (1 + headroom)).alias("recommended"),
        *(F.col(f"_{name}").alias(name) for name in CURRENT_COLUMNS),
        *(alias for _, alias in AT_CURRENT),
    )


# At the current quota (whatif's row with is_current): the replay's figures and the records'.
AT_CURRENT = (
    ("seconds_throttled", "current_seconds_throttled"),
    ("throttled_time_ms", "current_throttled_time_ms"),
    ("recorded_seconds_throttled", "current_recorded_seconds_throttled"),
    ("recorded_amount_delayed", "current_recorded_amount_delayed"),
    ("recorded_shadow_seconds_throttled", "current_shadow_seconds_throttled"),
    ("recorded_shadow_amount_delayed", "current_shadow_amount_delayed"),
)


def entity_rows(recommendations: pd.DataFrame) -> pd.DataFrame:
    """The recommendations for entities (user, client_id)."""
    return recommendations[recommendations["tenant"].isna()] if "tenant" in recommendations else recommendations


def tenant_rows(recommendations: pd.DataFrame) -> pd.DataFrame:
    """The recommendations for tenants (their `[[tenants]]` entries)."""
    return recommendations[recommendations["tenant"].notna()] if "tenant" in recommendations else recommendations[:0]


CURRENT_COLUMNS = ("current_quota", "current_shadow", "current_source", "quota_history")


def nice_quota(key: str, value: float) -> float:
    """Up to three significant digits, rounded up; whole numbers for byte rates."""
    if value <= 0:
        return value
    step = 10 ** (math.floor(math.log10(value)) - 2)
    rounded = math.ceil(value / step - 1e-9) * step
    return float(math.ceil(rounded)) if key in INTEGER_KEYS else float(f"{rounded:.6g}")


def with_current(recommendations: pd.DataFrame, table: QuotaTable | None) -> pd.DataFrame:
    """Adds `current`, the quota each entity (or tenant) had for each key (NaN when unlimited): as its
    records say (`current_source` "records"; always, for a tenant), else as `table` (the proxy's
    --config) gives it; and, at that quota, the recorded and shadow-observed time held at it
    (`current_recorded_held_ms`, `current_shadow_held_ms`: the amount over quota ÷ the quota, as
    `current_throttled_time_ms`). Whether a tenant's quota was shadow is what its records say; for
    records written before they said it (`current_shadow` null), its entry in `table`, when given,
    else binding."""
    out = recommendations.copy()
    out["recommended"] = [nice_quota(k, v) for k, v in zip(out["quota_key"], out["recommended"], strict=True)]
    for name in (*CURRENT_COLUMNS, "tenant"):
        if name not in out:
            out[name] = None
    current, sources, shadows = [], [], []
    for row in out.itertuples():
        shadow = row.current_shadow
        if not pd.isna(row.tenant):
            value, source = row.current_quota, row.current_source
            if pd.isna(shadow):  # records written before the tenant shadow flag
                declared = table.tenants.by_name.get(row.tenant) if table is not None else None
                shadow = declared is not None and declared.shadow
        elif row.current_source == "records":
            value, source = row.current_quota, row.current_source
        else:
            resolution = table.resolve(row.user, row.client_id, QuotaKey(row.quota_key)) if table else None
            value, source = (resolution.value if resolution else None), ("config" if table is not None else None)
        current.append(float("nan") if value is None or pd.isna(value) else float(value))
        sources.append(source)
        shadows.append(shadow)
    out["current"], out["current_source"], out["current_shadow"] = current, sources, shadows
    for measure in ("recorded", "shadow"):
        amount = out.get(f"current_{measure}_amount_delayed")
        held = []
        for key, quota, delayed in zip(
            out["quota_key"], out["current"], amount if amount is not None else [None] * len(out), strict=True
        ):
            known = delayed is not None and not pd.isna(delayed) and not pd.isna(quota) and quota > 0
            held.append(delayed / tokens_per_second(QuotaKey(key), quota) * 1000 if known else float("nan"))
        out[f"current_{measure}_held_ms"] = held
    return out


def _format(key: str, value: float) -> str:
    return str(int(value)) if key in INTEGER_KEYS or value == int(value) else f"{value:g}"


def shown(name: str) -> str:
    """A name as one line of ASCII (JSON's escapes), for comments and messages: a tenant's client id
    can hold newlines, terminal escapes or anything else, and must not end a comment or reach a
    terminal as control characters."""
    return json.dumps(name)


def unnamable(user: str, client_id: str) -> str | None:
    """Why the proxy's quota file cannot name this entity (None: it can). `<default>` is its default
    entity and an empty name is refused, so a tenant calling itself either must be left out rather
    than given (or breaking) everyone's quota. An ANONYMOUS user is a client-id quota (to_toml)."""
    for part, name in (("user", None if user == ANONYMOUS else user), ("client id", client_id)):
        if name == "":
            return f"its {part} is empty: the proxy's file has no name for it"
        if name == DEFAULT:
            return f"its {part} is spelled {DEFAULT}, which the proxy's file reads as the default entity"
    return None


def by_entity(recommendations: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(user, client_id) -> {quota key: recommended}, sorted by entity. Grouped in Python: pandas'
    groupby hashes strings as C strings, so it takes client ids "" and "\\0" for one."""
    recommendations = entity_rows(recommendations)
    entities: dict[tuple[str, str], dict[str, float]] = {}
    for user, client_id, key, value in zip(
        recommendations["user"],
        recommendations["client_id"],
        recommendations["quota_key"],
        recommendations["recommended"],
        strict=True,
    ):
        entities.setdefault((user, client_id), {})[key] = float(value)
    return dict(sorted(entities.items()))


def by_tenant(recommendations: pd.DataFrame) -> dict[str, dict[str, float]]:
    """tenant -> {quota key: recommended}, sorted by name."""
    recommendations = tenant_rows(recommendations)
    if recommendations.empty:
        return {}
    tenants: dict[str, dict[str, float]] = {}
    for tenant, key, value in zip(
        recommendations["tenant"], recommendations["quota_key"], recommendations["recommended"], strict=True
    ):
        tenants.setdefault(tenant, {})[key] = float(value)
    return dict(sorted(tenants.items()))


def quota_table(recommendations: pd.DataFrame, shadow: bool = False) -> QuotaTable:
    """The recommendations the proxy's file can name, as its QuotaTable (all shadow if `shadow`)."""
    quotas = {
        QuotaEntity(None if user == ANONYMOUS else user, client_id): {QuotaKey(k): v for k, v in values.items()}
        for (user, client_id), values in by_entity(recommendations).items()
        if unnamable(user, client_id) is None
    }
    return QuotaTable(quotas, frozenset(quotas) if shadow else frozenset())


def quota_entries(table: QuotaTable) -> list[str]:
    """`table` as [[quotas]] entries of the proxy's TOML, written by its own writer (every string a
    one-line basic string, so no name can make a line of its own), keys in a fixed order."""
    lines = []
    for entry in toml_data(table):
        lines += ["", "[[quotas]]", *(f"{key} = {toml_value(value)}" for key, value in entry.items())]
    return lines


def to_toml(recommendations: pd.DataFrame) -> str:
    """[[quotas]] entries for the proxy's configuration, one per entity. An ANONYMOUS user (no SASL)
    gets a client-id quota, as on a Kafka cluster without authentication. An entity the file cannot
    name (unnamable) is a comment saying why."""
    lines = ["# Recommended by `quotagate pipeline recommend`"]
    for user, client_id in by_entity(recommendations):
        why = unnamable(user, client_id)
        if why is not None:
            lines.append(f"# not written: user {shown(user)}, client id {shown(client_id)}: {why}")
    lines += quota_entries(quota_table(recommendations))
    tenants = by_tenant(recommendations)
    if tenants:
        # a tenant's entry holds its members, which only the operator knows: the quotas go into the
        # entries the file declares (`quotagate pipeline apply`), named here as comments
        lines += ["", "# Tenants: `quotagate pipeline apply` writes these into each one's [[tenants]] entry, by name"]
        for tenant, values in tenants.items():
            quotas = ", ".join(f"{key} = {_format(key, value)}" for key, value in sorted(values.items()))
            lines.append(f"# tenant {shown(tenant)}: {quotas}")
    return "\n".join(lines) + "\n"


def kafka_configs_problem(user: str, client_id: str) -> str | None:
    """Why kafka-configs.sh cannot be given this entity (None: it can): no argument can carry a NUL,
    and the tool reads an empty --entity-name as the default entity."""
    names = [client_id] if user == ANONYMOUS else [user, client_id]
    if any("\0" in name for name in names):
        return "a name holds a NUL character, which no command-line argument can carry"
    if "" in names:
        return "an empty name: kafka-configs.sh reads an empty --entity-name as the default entity"
    return None


def to_kafka_configs(recommendations: pd.DataFrame, bootstrap: str = "BROKER:9092") -> str:
    """The same quotas as kafka-configs.sh commands, for a cluster without the proxy. Every name is
    one shell word (shlex.quote); an entity the tool cannot be given is a comment saying why."""
    commands = []
    for (user, client_id), values in by_entity(recommendations).items():
        why = kafka_configs_problem(user, client_id)
        if why is not None:
            commands.append(f"# not written: user {shown(user)}, client id {shown(client_id)}: {why}")
            continue
        config = ",".join(f"{k}={_format(k, v)}" for k, v in sorted(values.items()))
        entity = "" if user == ANONYMOUS else f"--entity-type users --entity-name {shlex.quote(user)} "
        commands.append(
            f"kafka-configs.sh --bootstrap-server {shlex.quote(bootstrap)} --alter --add-config {shlex.quote(config)} "
            f"{entity}--entity-type clients --entity-name {shlex.quote(client_id)}"
        )
    if by_tenant(recommendations):
        commands.append("# not written: the tenants' quotas (quotas.toml, apply): Kafka has no tenants")
    return "\n".join(commands) + "\n"
