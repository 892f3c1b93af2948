"""`quotagate pipeline <job>`: the edge where the SparkSession is made, read and written.

Every job reads and writes files (Parquet tables, TOML, shell, HTML); the job modules themselves
only turn DataFrames into DataFrames. Spark runs locally (local[*]) unless --master names a cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

JOBS = ("ingest", "rollup", "whatif", "recommend", "report", "all", "generate", "apply", "promote")
# Jobs that only edit the proxy's quota file: no SparkSession.
WITHOUT_SPARK = ("apply", "promote")


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
            "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)"
        )
        return parser

    def ingest_inputs(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--input", action="append", default=[], help="a usage file or directory (repeatable)")
        parser.add_argument("--kafka-bootstrap", help="read the usage topic from this Kafka cluster instead")
        parser.add_argument("--kafka-topic", default="quotagate-usage")
        parser.add_argument("--kafka-state", help="checkpoint and raw copy of the topic (default TABLE.kafka)")

    def candidates(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--config",
            help="the proxy's TOML: its quota windows, and the current quotas of entities whose usage records "
            "do not say which quota was in force (records name it since schema 2's quota fields)",
        )
        parser.add_argument(
            "--quota", action="append", default=[], metavar="KEY=VALUE", help="a candidate quota (repeatable)"
        )
        parser.add_argument("--candidates", help="CSV of candidates: quota_key,quota[,user,client_id]")

    def objective(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--objective", type=float, default=0.01, help="largest share of active seconds throttled")
        parser.add_argument("--headroom", type=float, default=0.2, help="added to the quota meeting the objective")
        parser.add_argument("--bootstrap", default="BROKER:9092", help="for the kafka-configs.sh commands")

    parser = job("ingest", "usage records (files or the usage topic) → one deduplicated Parquet table")
    ingest_inputs(parser)
    parser.add_argument("--table", required=True)
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
    parser = job("report", "one self-contained HTML file")
    parser.add_argument("--table", required=True)
    parser.add_argument("--whatif", required=True)
    parser.add_argument("--recommendations", required=True, help="the --out folder of recommend")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser = job("all", "ingest, rollup, whatif, recommend and report into one folder")
    ingest_inputs(parser)
    parser.add_argument("--work", required=True, help="folder for the table and every output")
    candidates(parser)
    objective(parser)
    parser = job("apply", "write the recommendations into the proxy's quota file as shadow quotas (it reloads)")
    parser.add_argument("--recommendations", required=True, help="the --out folder of recommend")
    parser.add_argument("--config", required=True, help="the running proxy's TOML file, edited in place")
    parser.add_argument(
        "--quota-key", action="append", default=[], help="apply only this key's recommendations (repeatable)"
    )
    parser = job("promote", "make the quotas `apply` wrote binding (drops their shadow flags)")
    parser.add_argument("--config", required=True, help="the running proxy's TOML file, edited in place")
    parser = job("generate", "synthetic usage records with known rates and bursts")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--records", choices=("aggregate", "request"), default="aggregate")


def run(args: argparse.Namespace) -> int:
    if args.job in WITHOUT_SPARK:
        from quotagate.config.settings import ConfigError

        try:
            return JOB_RUNNERS[args.job](None, args)
        except (FileNotFoundError, ValueError, ConfigError) as exc:
            print(f"quotagate pipeline {args.job}: {exc}", file=sys.stderr)
            return 1
    try:
        from quotagate.pipeline.session import create_session
    except ImportError as exc:
        print(
            f"quotagate pipeline needs the pipeline extra: pip install 'quotagate[pipeline]' ({exc})", file=sys.stderr
        )
        return 2
    conf = dict(item.split("=", 1) for item in args.conf)
    with_kafka = bool(getattr(args, "kafka_bootstrap", None))
    try:
        spark = create_session(args.master, f"quotagate-pipeline-{args.job}", conf, with_kafka=with_kafka)
    except FileNotFoundError as exc:
        print(f"quotagate pipeline: {exc}", file=sys.stderr)
        return 2
    try:
        return JOB_RUNNERS[args.job](spark, args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"quotagate pipeline {args.job}: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def _ingest(spark, args: argparse.Namespace, table_path: str) -> int:
    from quotagate.pipeline.ingest import classify, ingest, problems_in, read_usage_files, read_usage_topic, write_table

    if not args.input and not args.kafka_bootstrap:
        raise ValueError("give --input (files or directories) or --kafka-bootstrap (the usage topic)")
    raw, problems = read_usage_files(spark, args.input) if args.input else (None, [])
    if args.kafka_bootstrap:
        state = args.kafka_state or f"{table_path.rstrip('/')}.kafka"
        from_topic = read_usage_topic(spark, args.kafka_bootstrap, args.kafka_topic, state)
        raw = from_topic if raw is None else raw.unionByName(from_topic)
    classified = classify(raw).cache()
    problems += problems_in(classified)
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    existing = None
    if Path(table_path).exists():
        from quotagate.pipeline.ingest import read_table

        existing = read_table(spark, table_path)
    table = ingest(classified, existing).cache()
    rows = table.count()
    if rows == 0:
        print("quotagate pipeline ingest: no usage records to ingest", file=sys.stderr)
        return 1
    write_table(table, table_path)
    print(f"usage table: {table_path} ({rows} rows; {len(problems)} problems)")
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
    from quotagate.pipeline.ingest import read_table
    from quotagate.pipeline.whatif import whatif

    candidates, config = _candidates(args)
    windows = config.windows if config else None
    stand_in = config.quotas if config else None
    whatif(read_table(spark, table_path), candidates, windows, stand_in=stand_in).write.mode("overwrite").parquet(out)
    print(f"what-if: {out}")


def _recommend(spark, args: argparse.Namespace, whatif_path: str, out: str) -> object:
    from quotagate.config import load_config
    from quotagate.pipeline.recommend import recommend, to_kafka_configs, to_toml, with_current

    config = load_config(args.config) if args.config else None
    found = recommend(spark.read.parquet(whatif_path), args.objective, args.headroom).toPandas()
    found = with_current(found, config.quotas if config else None)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    found.to_parquet(folder / "recommendations.parquet")
    (folder / "quotas.toml").write_text(to_toml(found), encoding="utf-8")
    (folder / "kafka-configs.sh").write_text("#!/bin/sh\n" + to_kafka_configs(found, args.bootstrap), encoding="utf-8")
    print(f"recommendations: {folder / 'quotas.toml'} and {folder / 'kafka-configs.sh'}")
    return found


def _report(spark, table_path: str, whatif_path: str, recommendations, out: str) -> None:
    from quotagate.pipeline.ingest import read_table
    from quotagate.pipeline.report import render_report, report_data

    data = report_data(read_table(spark, table_path), spark.read.parquet(whatif_path), recommendations)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(render_report(data), encoding="utf-8")
    print(f"report: {Path(out).resolve()}")


def _run_ingest(spark, args) -> int:
    return _ingest(spark, args, args.table)


def _run_rollup(spark, args) -> int:
    from quotagate.pipeline.ingest import read_table
    from quotagate.pipeline.rollup import release, rollup

    table = read_table(spark, args.table)
    for name, frame in rollup(table).items():
        frame.write.mode("overwrite").parquet(str(Path(args.out) / name))
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
    import pandas as pd

    recommendations = pd.read_parquet(Path(args.recommendations) / "recommendations.parquet")
    _report(spark, args.table, args.whatif, recommendations, args.out)
    return 0


def _run_all(spark, args) -> int:
    work = Path(args.work)
    table = str(work / "usage-table")
    status = _ingest(spark, args, table)
    if status:
        return status
    args.table, args.out = table, str(work / "rollup")
    _run_rollup(spark, args)
    _whatif(spark, args, table, str(work / "whatif"))
    found = _recommend(spark, args, str(work / "whatif"), str(work / "recommendations"))
    _report(spark, table, str(work / "whatif"), found, str(work / "report.html"))
    return 0


def _run_generate(spark, args) -> int:
    from quotagate.pipeline.synthetic import SyntheticEntity, synthetic_aggregates, synthetic_requests

    entities = [
        SyntheticEntity("ANONYMOUS", "steady-producer", 200_000, 20),
        SyntheticEntity(
            "ANONYMOUS", "bursty-producer", 50_000, 10, burst_every_seconds=60, burst_seconds=5, burst_factor=8
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

    from quotagate.pipeline.apply import apply_shadow, shadow_recommendations, write_config
    from quotagate.pipeline.recommend import by_entity
    from quotagate.quotas import QuotaKey

    recommendations = pd.read_parquet(Path(args.recommendations) / "recommendations.parquet")
    if args.quota_key:  # a name that is no quota key is refused (ValueError), not silently matched by nothing
        keys = [QuotaKey(name).value for name in args.quota_key]
        recommendations = recommendations[recommendations["quota_key"].isin(keys)]
    text = Path(args.config).read_text(encoding="utf-8")
    tried, skipped = shadow_recommendations(recommendations, text)
    for reason in skipped:
        print(f"not applied: {reason}", file=sys.stderr)
    write_config(args.config, apply_shadow(text, tried))
    entities = len(by_entity(tried))
    print(
        f"applied as shadow quotas: {len(tried)} quotas of {entities} entities in {args.config} (the proxy reloads it)"
    )
    return 0


def _run_promote(_spark, args) -> int:
    from quotagate.pipeline.apply import promote, write_config

    text, promoted = promote(Path(args.config).read_text(encoding="utf-8"))
    write_config(args.config, text)
    print(f"promoted: {promoted} shadow entries of {args.config} are now enforced")
    return 0


JOB_RUNNERS = {
    "ingest": _run_ingest,
    "rollup": _run_rollup,
    "whatif": _run_whatif,
    "recommend": _run_recommend,
    "report": _run_report,
    "all": _run_all,
    "generate": _run_generate,
    "apply": _run_apply,
    "promote": _run_promote,
}
