"""`quotagate pipeline <job>`: the edge where the SparkSession is made, read and written.

Every job reads and writes through Spark and Hadoop's filesystems: inputs, the table, --work and
--out are any Hadoop-compatible URIs (storage.py); only the proxy's quota file of apply and promote
is a local path. The job modules themselves only turn DataFrames into DataFrames. Spark runs locally
(local[*]) unless --master names a cluster.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from quotagate.config.settings import ConfigError
from quotagate.pipeline.rates import PERIODS, parse_rates

JOBS = (
    "ingest",
    "rollup",
    "whatif",
    "recommend",
    "report",
    "chargeback",
    "all",
    "generate",
    "apply",
    "promote",
    "migrate",
    "compact",
    "retention",
)
# Jobs that only edit the proxy's quota file: a SparkSession only to read recommendations that are
# not on a local disk.
WITHOUT_SPARK = ("apply", "promote")
RECOMMENDATIONS = "recommendations.parquet"


def add_parser(commands: argparse._SubParsersAction) -> None:
    pipeline = commands.add_parser("pipeline", help="the usage pipeline on Spark (needs quotagate[pipeline])")
    jobs = pipeline.add_subparsers(dest="job", required=True)

    def job(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = jobs.add_parser(name, help=help_text)
        parser.add_argument(
            "--master",
            default="local[*]",
            help="Spark master (default local[*]); e.g. spark://host:7077, yarn, k8s://https://host:443",
        )
        parser.add_argument(
            "--conf",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a Spark setting (repeatable): spark.hadoop.fs.s3a.* for the object store, spark.jars.packages …",
        )
        return parser

    def ingest_inputs(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--input", action="append", default=[], help="a usage file or directory, any URI (repeatable)"
        )
        parser.add_argument("--kafka-bootstrap", help="read the usage topic from this Kafka cluster instead")
        parser.add_argument("--kafka-topic", default="quotagate-usage")
        parser.add_argument("--kafka-state", help="the topic's checkpoint, any URI (default TABLE.kafka)")

    def candidates(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--config",
            help="the proxy's TOML (a local file): its quota windows, and the current quotas of entities whose "
            "usage records do not say which quota was in force (records name it since schema 2's quota fields)",
        )
        parser.add_argument(
            "--quota", action="append", default=[], metavar="KEY=VALUE", help="a candidate quota (repeatable)"
        )
        parser.add_argument(
            "--candidates", help="CSV of candidates: quota_key,quota[,user,client_id][,tenant] (a local file)"
        )

    def objective(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--objective", type=float, default=0.01, help="largest share of active seconds throttled")
        parser.add_argument("--headroom", type=float, default=0.2, help="added to the quota meeting the objective")
        parser.add_argument("--bootstrap", default="BROKER:9092", help="for the kafka-configs.sh commands")

    parser = job("ingest", "usage records (files or the usage topic) merged into the usage table (Delta Lake)")
    ingest_inputs(parser)
    parser.add_argument("--table", required=True, help="the usage table, any URI")
    parser = job("rollup", "per entity and topic, per second and minute")
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True)
    parser = job("whatif", "replay each entity against candidate quotas")
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True)
    candidates(parser)
    parser = job("recommend", "the smallest quota meeting an objective, as TOML and kafka-configs.sh")
    parser.add_argument("--whatif", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--config", help="the proxy's TOML: current quotas for entities whose usage records do not name them"
    )
    objective(parser)

    def rates(parser: argparse.ArgumentParser, required: bool) -> None:
        parser.add_argument(
            "--rates",
            required=required,
            help="prices per GB in and out and per request-second (TOML, a local file: docs/pipeline.md)",
        )

    parser = job("report", "one self-contained HTML file")
    parser.add_argument("--table", required=True)
    parser.add_argument("--whatif", required=True)
    parser.add_argument("--recommendations", required=True, help="the --out folder of recommend")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    rates(parser, required=False)
    parser = job("chargeback", "per tenant and entity and period: shares of the cluster and costs, as CSV and Parquet")
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True, help="folder (any URI) for chargeback.csv and chargeback.parquet")
    rates(parser, required=True)
    parser.add_argument("--period", choices=PERIODS, default="month", help="calendar periods in UTC (default month)")
    parser.add_argument("--since", metavar="YYYY-MM-DD", help="the first day counted (default: the table's first)")
    parser.add_argument("--until", metavar="YYYY-MM-DD", help="the last day counted, included (default: the last)")
    parser = job("all", "ingest, rollup, whatif, recommend and report into one folder")
    ingest_inputs(parser)
    parser.add_argument("--work", required=True, help="folder (any URI) for the table and every output")
    candidates(parser)
    objective(parser)
    rates(parser, required=False)
    parser = job("apply", "write the recommendations into the proxy's quota file as shadow quotas (it reloads)")
    parser.add_argument("--recommendations", required=True, help="the --out folder of recommend (any URI)")
    parser.add_argument("--config", required=True, help="the running proxy's TOML file (local), edited in place")
    parser.add_argument(
        "--quota-key", action="append", default=[], help="apply only this key's recommendations (repeatable)"
    )
    parser = job("promote", "make the quotas `apply` wrote binding (drops their shadow flags)")
    parser.add_argument("--config", required=True, help="the running proxy's TOML file (local), edited in place")
    parser = job("generate", "synthetic usage records with known rates and bursts")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--records", choices=("aggregate", "request"), default="aggregate")
    parser = job("migrate", "make a plain-Parquet usage table (from before Delta Lake) a Delta table, in place")
    parser.add_argument("--table", required=True)
    parser = job("compact", "rewrite the usage table's small files into fewer (OPTIMIZE); --vacuum deletes old ones")
    parser.add_argument("--table", required=True)
    parser.add_argument("--since", metavar="YYYY-MM-DD", help="only the dates from this one on")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="then delete the files the table stopped referencing more than --retain-hours ago (VACUUM)",
    )
    parser.add_argument(
        "--retain-hours", type=float, help="for --vacuum (default: the table's retention, 168 h unless set)"
    )
    parser = job("retention", "drop the usage table's days older than --keep-days")
    parser.add_argument("--table", required=True)
    parser.add_argument("--keep-days", type=int, required=True, help="days kept, today (UTC) included")
    parser.add_argument("--today", metavar="YYYY-MM-DD", help="instead of today's UTC date")


def run(args: argparse.Namespace) -> int:
    if args.job in WITHOUT_SPARK:
        try:
            return JOB_RUNNERS[args.job](None, args)
        except (FileNotFoundError, ValueError, ConfigError) as exc:
            print(f"quotagate pipeline {args.job}: {exc}", file=sys.stderr)
            return 1
    try:  # the local files a job reads, checked before a JVM starts
        args.loaded_rates = _rates(args)
        _check_days(args)
    except ConfigError as exc:
        print(f"quotagate pipeline {args.job}: bad rates file {args.rates}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"quotagate pipeline {args.job}: {exc}", file=sys.stderr)
        return 2
    try:
        spark = session_for(args)
    except ImportError as exc:
        print(
            f"quotagate pipeline needs the pipeline extra: pip install 'quotagate[pipeline]' ({exc})", file=sys.stderr
        )
        return 2
    except (FileNotFoundError, ValueError, RuntimeError) as exc:  # MissingJars, a bad setting
        print(f"quotagate pipeline: {exc}", file=sys.stderr)
        return 2
    try:
        return JOB_RUNNERS[args.job](spark, args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"quotagate pipeline {args.job}: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def _rates(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The --rates file's Rates, or None; a ConfigError naming the key when it is wrong."""
    if not getattr(args, "rates", None):
        return None
    try:
        text = Path(args.rates).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("file", f"cannot read it: {exc.strerror}") from exc
    return parse_rates(text)


def _check_days(args: argparse.Namespace) -> None:
    import datetime

    for name in ("since", "until"):
        value = getattr(args, name, None)
        if value is not None:
            try:
                datetime.date.fromisoformat(value)
            except ValueError:
                raise ValueError(f"--{name} {value!r}: give a day as YYYY-MM-DD") from None
    if getattr(args, "since", None) and getattr(args, "until", None) and args.since > args.until:
        raise ValueError(f"--since {args.since} is after --until {args.until}")


def session_for(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The job's SparkSession, with the jars its inputs and outputs need (session.create_session)."""
    from quotagate.pipeline.session import create_session

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf {item!r}: give KEY=VALUE")
        conf[key] = value
    uris = [
        *getattr(args, "input", []),
        *(getattr(args, name, None) or "" for name in ("table", "out", "work", "whatif", "recommendations")),
        getattr(args, "kafka_state", None) or "",
    ]
    with_kafka = bool(getattr(args, "kafka_bootstrap", None))
    return create_session(args.master, f"quotagate-pipeline-{args.job}", conf, with_kafka=with_kafka, uris=uris)


def _ingest(spark, args: argparse.Namespace, table: str) -> int:
    from quotagate.pipeline.ingest import Ingested, ingest_files, ingest_topic
    from quotagate.pipeline.table import table_format

    if not args.input and not args.kafka_bootstrap:
        raise ValueError("give --input (files or directories) or --kafka-bootstrap (the usage topic)")
    done = Ingested()
    if args.input:
        found = ingest_files(spark, args.input, table)
        done.add(found, found.problems)
    if args.kafka_bootstrap:
        state = args.kafka_state or f"{table.rstrip('/')}.kafka"
        found = ingest_topic(spark, args.kafka_bootstrap, args.kafka_topic, state, table)
        done.add(found, found.problems)
    for problem in done.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    from quotagate.pipeline.storage import Storage

    if not done.inserted and table_format(Storage(spark), table) is None:
        print("quotagate pipeline ingest: no usage records to ingest", file=sys.stderr)
        return 1
    days = f" in {len(done.dates)} days" if done.dates else ""
    print(f"usage table: {table} ({done.inserted} rows added{days}; {len(done.problems)} problems)")
    return 0


def _candidates(args: argparse.Namespace):
    import pandas as pd

    from quotagate.config import load_config
    from quotagate.quotas import QuotaKey

    config = load_config(args.config) if args.config else None
    rows = []
    for item in args.quota:
        key, _, value = item.partition("=")
        rows.append({"quota_key": QuotaKey(key).value, "quota": float(value), "user": None, "client_id": None})
    frames = [pd.DataFrame(rows)] if rows else []
    if args.candidates:
        frames.append(pd.read_csv(args.candidates))
    candidates = pd.concat(frames, ignore_index=True) if frames else None
    return candidates, config


def _whatif(spark, args: argparse.Namespace, table_path: str, out: str) -> None:
    from quotagate.pipeline.table import read_table
    from quotagate.pipeline.whatif import whatif

    candidates, config = _candidates(args)
    windows = config.windows if config else None
    stand_in = config.quotas if config else None
    table = read_table(spark, table_path)
    results = whatif(table, candidates, windows, stand_in=stand_in)
    results.write.mode("overwrite").parquet(out)
    print(f"what-if: {out}")


def _recommend(spark, args: argparse.Namespace, whatif_path: str, out: str) -> object:
    from quotagate.config import load_config
    from quotagate.pipeline.recommend import recommend, to_kafka_configs, to_toml, with_current
    from quotagate.pipeline.storage import Storage, child

    config = load_config(args.config) if args.config else None
    found = recommend(spark.read.parquet(whatif_path), args.objective, args.headroom).toPandas()
    found = with_current(found, config.quotas if config else None)
    storage = Storage(spark)
    parquet = io.BytesIO()
    found.to_parquet(parquet)
    storage.write_bytes(child(out, RECOMMENDATIONS), parquet.getvalue())
    storage.write_text(child(out, "quotas.toml"), to_toml(found))
    storage.write_text(child(out, "kafka-configs.sh"), "#!/bin/sh\n" + to_kafka_configs(found, args.bootstrap))
    print(f"recommendations: {child(out, 'quotas.toml')} and {child(out, 'kafka-configs.sh')}")
    return found


def read_recommendations(spark, folder: str):  # type: ignore[no-untyped-def]
    """recommendations.parquet of a recommend --out folder, any URI."""
    import pandas as pd

    from quotagate.pipeline.storage import Storage, child

    return pd.read_parquet(io.BytesIO(Storage(spark).read_bytes(child(folder, RECOMMENDATIONS))))


def _report(spark, table_path: str, whatif_path: str, recommendations, out: str, rates) -> None:
    from quotagate.pipeline.report import render_report, report_data
    from quotagate.pipeline.storage import Storage
    from quotagate.pipeline.table import read_table

    data = report_data(read_table(spark, table_path), spark.read.parquet(whatif_path), recommendations, rates=rates)
    storage = Storage(spark)
    storage.write_text(out, render_report(data))
    print(f"report: {storage.qualified(out)}")


def _run_ingest(spark, args) -> int:
    return _ingest(spark, args, args.table)


def _run_rollup(spark, args) -> int:
    from quotagate.pipeline.rollup import release, rollup
    from quotagate.pipeline.storage import child
    from quotagate.pipeline.table import read_table

    table = read_table(spark, args.table)
    for name, frame in rollup(table).items():
        frame.write.mode("overwrite").parquet(child(args.out, name))
    release(table)
    print(f"roll-ups: {args.out}")
    return 0


def _run_whatif(spark, args) -> int:
    _whatif(spark, args, args.table, args.out)
    return 0


def _run_recommend(spark, args) -> int:
    _recommend(spark, args, args.whatif, args.out)
    return 0


def _run_report(spark, args) -> int:
    recommendations = read_recommendations(spark, args.recommendations)
    _report(spark, args.table, args.whatif, recommendations, args.out, args.loaded_rates)
    return 0


def _chargeback(spark, table_path: str, out: str, rates, period: str, since: str | None, until: str | None) -> None:
    from quotagate.pipeline.chargeback import chargeback, ordered
    from quotagate.pipeline.storage import Storage, child
    from quotagate.pipeline.table import read_table

    found = ordered(chargeback(read_table(spark, table_path), rates, period, since, until).toPandas())
    storage = Storage(spark)
    parquet = io.BytesIO()
    found.to_parquet(parquet, index=False)
    storage.write_bytes(child(out, "chargeback.parquet"), parquet.getvalue())
    storage.write_text(child(out, "chargeback.csv"), found.to_csv(index=False))
    print(f"chargeback: {child(out, 'chargeback.csv')} and {child(out, 'chargeback.parquet')} ({len(found)} rows)")


def _run_chargeback(spark, args) -> int:
    _chargeback(spark, args.table, args.out, args.loaded_rates, args.period, args.since, args.until)
    return 0


def _run_all(spark, args) -> int:
    from quotagate.pipeline.storage import child

    work = args.work
    table = child(work, "usage-table")
    status = _ingest(spark, args, table)
    if status:
        return status
    args.table, args.out = table, child(work, "rollup")
    _run_rollup(spark, args)
    _whatif(spark, args, table, child(work, "whatif"))
    found = _recommend(spark, args, child(work, "whatif"), child(work, "recommendations"))
    if args.loaded_rates is not None:
        _chargeback(spark, table, child(work, "chargeback"), args.loaded_rates, "month", None, None)
    _report(spark, table, child(work, "whatif"), found, child(work, "report.html"), args.loaded_rates)
    return 0


def _run_generate(spark, args) -> int:
    from quotagate.pipeline.synthetic import SyntheticEntity, synthetic_aggregates, synthetic_requests

    team = {"tenant": "ingest-team", "tenant_quota": 300_000}  # the two producers' tenant and its quota
    entities = [
        SyntheticEntity("ANONYMOUS", "steady-producer", 200_000, 20, **team),
        SyntheticEntity(
            "ANONYMOUS", "bursty-producer", 50_000, 10, burst_every_seconds=60, burst_seconds=5, burst_factor=8, **team
        ),
        SyntheticEntity("alice", "consumer", 400_000, 10, api_key=1),
    ]
    make = synthetic_requests if args.records == "request" else synthetic_aggregates
    frame = make(spark, entities, args.seconds).drop("date")
    if args.records == "request":
        frame.write.mode("overwrite").json(args.out)
    else:
        frame.write.mode("overwrite").parquet(args.out)
    print(f"synthetic usage: {args.out}")
    return 0


def _run_apply(_spark, args) -> int:
    import pandas as pd

    from quotagate.pipeline.apply import apply_shadow, shadow_recommendations, tenant_skips, write_config
    from quotagate.pipeline.recommend import by_entity, tenant_rows
    from quotagate.pipeline.storage import LOCAL_SCHEMES, scheme_of, shown_path
    from quotagate.quotas import QuotaKey

    if scheme_of(args.recommendations) in LOCAL_SCHEMES:  # no JVM for a local file
        recommendations = pd.read_parquet(Path(shown_path(args.recommendations)) / RECOMMENDATIONS)
    else:  # on an object store or HDFS: read through Hadoop's filesystems, with the job's --conf
        spark = session_for(args)
        try:
            recommendations = read_recommendations(spark, args.recommendations)
        finally:
            spark.stop()
    if args.quota_key:  # a name that is no quota key is refused (ValueError), not silently matched by nothing
        keys = [QuotaKey(name).value for name in args.quota_key]
        recommendations = recommendations[recommendations["quota_key"].isin(keys)]
    text = Path(args.config).read_text(encoding="utf-8")
    tried, skipped = shadow_recommendations(recommendations, text)
    tenants_skipped = tenant_skips(text, recommendations)
    for reason in [*skipped, *tenants_skipped]:
        print(f"not applied: {reason}", file=sys.stderr)
    for_tenants = tenant_rows(recommendations)  # apply_shadow writes those tenant_skips does not name
    write_config(args.config, apply_shadow(text, pd.concat([tried, for_tenants])))
    written = set(zip(for_tenants.get("tenant", []), for_tenants["quota_key"], strict=True))
    written -= {(skip.client_id, skip.quota_key) for skip in tenants_skipped}
    entities, quotas, tenants = len(by_entity(tried)), len(tried) + len(written), {tenant for tenant, _ in written}
    print(
        f"applied as shadow quotas: {quotas} quotas of {entities} entities and {len(tenants)} tenants in {args.config} "
        "(the proxy reloads it)"
    )
    return 0


def _run_promote(_spark, args) -> int:
    from quotagate.pipeline.apply import promote, write_config

    text, promoted = promote(Path(args.config).read_text(encoding="utf-8"))
    write_config(args.config, text)
    print(f"promoted: {promoted} shadow entries of {args.config} are now enforced")
    return 0


def _run_migrate(spark, args) -> int:
    from quotagate.pipeline.table import migrate

    print(migrate(spark, args.table))
    return 0


def _run_compact(spark, args) -> int:
    from quotagate.pipeline.table import compact, vacuum

    metrics = compact(spark, args.table, args.since).first()["metrics"]
    print(
        f"compacted {args.table}: {metrics['numFilesRemoved']} files rewritten into {metrics['numFilesAdded']} "
        f"in {metrics['partitionsOptimized']} dates"
    )
    if args.vacuum:
        vacuum(spark, args.table, args.retain_hours)
        print(f"vacuumed {args.table}: unreferenced files past the retention deleted")
    return 0


def _run_retention(spark, args) -> int:
    import datetime

    from quotagate.pipeline.table import drop_days_before

    if args.keep_days < 1:
        raise ValueError(f"--keep-days must be at least 1, got {args.keep_days}")
    today = datetime.date.fromisoformat(args.today) if args.today else datetime.datetime.now(datetime.UTC).date()
    first_kept = (today - datetime.timedelta(days=args.keep_days - 1)).isoformat()
    removed = drop_days_before(spark, args.table, first_kept)
    print(
        f"retention {args.table}: {removed} rows of dates before {first_kept} removed "
        "(their files are deleted by `compact --vacuum` once past the table's retention)"
    )
    return 0


JOB_RUNNERS = {
    "ingest": _run_ingest,
    "rollup": _run_rollup,
    "whatif": _run_whatif,
    "recommend": _run_recommend,
    "report": _run_report,
    "chargeback": _run_chargeback,
    "all": _run_all,
    "generate": _run_generate,
    "apply": _run_apply,
    "promote": _run_promote,
    "migrate": _run_migrate,
    "compact": _run_compact,
    "retention": _run_retention,
}
