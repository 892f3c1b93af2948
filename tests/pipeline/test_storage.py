"""The whole pipeline where platform teams run it: `quotagate pipeline all` on a standalone Spark
cluster of two workers, every input and output on real storage — an S3-compatible object store
(S3Proxy) and HDFS (a NameNode and a DataNode) — started on 127.0.0.1 once per
test session (conftest.py). The driver and the executors share nothing but the store: the usage
files are put there with Hadoop's own `hadoop fs -put`, the usage topic is read by the executors,
quotagate reaches the executors as a zip, its jars through spark.jars, and every output is written
to the store. Then a second application ingests the same files and topic again: nothing changes.

One end-to-end run per store, run by `make test-storage` (storage_only): each takes minutes on the
shared two-core machine (HDFS: 546 s, and 121 s to start the stores, the cluster and Kafka, at a
load average of 15-24; an earlier run under 25-30 was still in the report, its last job, at 600 s),
too long for `make test`.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.spark_storage import hadoop_fs

# Two applications on a cluster sharing two cores with everything else: minutes, over ten under load.
pytestmark = [pytest.mark.storage_only, pytest.mark.timeout(2400)]
ALL_TIMEOUT_S, CHECK_TIMEOUT_S = 1500, 600
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECONDS = 40


def v2_record(writer: str, seq: int, client_id: str, second: int, bytes_per_second: int) -> dict:
    ts = START_MS + second * 1000
    return {
        "v": 2,
        "ts": ts,
        "interval_ms": 1000,
        "proxy": "p",
        "writer": writer,
        "seq": seq,
        "user": "ANONYMOUS",
        "client_id": client_id,
        "api_key": 0,
        "topic": "orders",
        "requests": 10,
        "bytes_in": bytes_per_second,
        "bytes_out": 500,
        "request_time_ms": 20.0,
        "throttle_ms": 0,
        "throttle_ms_max": 0,
        "throttled_requests": 0,
        "refusals": 0,
        "partitions_mutated": 0,
        "shadow_throttle_ms": 0,
        "throttled_bytes": 0,
        "first_ms": ts,
        "last_ms": ts + 900,
        "charge_offset_ms": 4500.0,
    }


def write_usage_files(folder: Path) -> int:
    """Parquet v2 (two files, as two flushes), JSONL v1 and a file with a bad line; the rows they make."""
    folder.mkdir(parents=True)
    for part, client_id in enumerate(("files-steady", "files-bursty")):
        records = [
            v2_record(f"w{part}", s, client_id, s, 100_000 * (1 + (part and s % 10 < 2) * 4)) for s in range(SECONDS)
        ]
        pq.write_table(pa.Table.from_pylist(records), folder / f"usage-{part}.parquet")
    requests = [
        {"v": 1, "ts": START_MS + i * 100, "proxy": "p", "writer": "v1", "seq": i, "user": "alice"}
        | {"client_id": "files-v1", "api_key": 0, "api_version": 9, "topics": ["orders"], "bytes_in": 5000}
        | {"bytes_out": 50, "upstream_latency_ms": 2.0, "throttle_ms": 0, "decision": "ok", "partitions_mutated": 0}
        for i in range(SECONDS * 10)
    ]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    (folder / "broken.jsonl").write_text(json.dumps(requests[0] | {"seq": 10**6}) + "\n{not json\n")
    return 2 * SECONDS + len(requests) + 1


def produce_usage_topic(bootstrap: str, topic: str) -> int:
    create_topic(bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for s in range(SECONDS):
        producer.send(topic, json.dumps(v2_record("topic-w", s, "topic-producer", s, 300_000)).encode())
    producer.flush()
    producer.close()
    return SECONDS


# The second application: what the ingest job does, again, on the cluster; then what is in the store.
CHECK_ON_THE_CLUSTER = """
import json, sys
from quotagate.pipeline.ingest import ingest_files, ingest_topic
from quotagate.pipeline.session import create_session
from quotagate.pipeline.storage import Storage, child
from quotagate.pipeline.table import read_table

master, conf, base, bootstrap, topic = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:]
table = child(base, "work", "usage-table")
spark = create_session(master, "quotagate-storage-check", conf, with_kafka=True, uris=[base])
files = ingest_files(spark, [child(base, "usage")], table)
from_topic = ingest_topic(spark, bootstrap, topic, table + ".kafka", table)
storage = Storage(spark)
outputs = ["report.html", "recommendations/quotas.toml", "recommendations/kafka-configs.sh",
           "recommendations/recommendations.parquet", "whatif", "rollup/entity_minute", "rollup/topic_second"]
result = {
    "again": [files.inserted, from_topic.inserted],
    "rows": read_table(spark, table).count(),
    "missing": [name for name in outputs if not storage.exists(child(base, "work", name))],
    "toml": storage.read_text(child(base, "work", "recommendations", "quotas.toml")),
    "report": len(storage.read_text(child(base, "work", "report.html"))),
    "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1,
}
print("RESULT " + json.dumps(result))
spark.stop()
"""


def run_python(args: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`args` run to the end, or past `timeout` made to print where it is (Python's faulthandler, on
    SIGABRT) and answered as a failure: a run stuck on the cluster says in which job."""
    process = subprocess.Popen(
        [sys.executable, "-u", "-X", "faulthandler", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate()
        err += f"\n(stopped after {timeout:g} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def failure(done: subprocess.CompletedProcess[str], log: Path) -> str:
    """What a failed run printed: its output, the first lines naming an exception, and the tail; the
    whole of its stderr is kept in `log`."""
    log.write_text(done.stderr)
    named = [line for line in done.stderr.splitlines() if "Exception" in line or "Error" in line][:8]
    return "\n".join([done.stdout[-2000:], *named, done.stderr[-3000:], f"(all of its stderr: {log})"])


@pytest.fixture(params=["s3a", "hdfs"])
def store(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return request.getfixturevalue("object_store" if request.param == "s3a" else "hdfs")


def test_the_whole_pipeline_runs_on_a_standalone_cluster_against_the_store_and_reingests_nothing(
    store, standalone_cluster, kafka, tmp_path: Path
) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    base = store.uri(run)
    file_rows = write_usage_files(tmp_path / run / "usage")
    hadoop_fs(store.hadoop_conf(), "-put", str(tmp_path / run), store.uri())
    topic = unique_topic("quotagate-usage")
    topic_rows = produce_usage_topic(kafka.bootstrap, topic)
    conf = {**store.spark_conf(), **standalone_cluster.spark_conf()}
    settings = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]

    done = run_python(
        [
            "-m",
            "quotagate",
            "pipeline",
            "all",
            "--master",
            standalone_cluster.url,
            *settings,
            "--input",
            f"{base}/usage",
            "--kafka-bootstrap",
            kafka.bootstrap,
            "--kafka-topic",
            topic,
            "--work",
            f"{base}/work",
            "--bootstrap",
            "k:9092",
        ],
        ALL_TIMEOUT_S,
        tmp_path,
    )
    assert done.returncode == 0, failure(done, tmp_path / "all.stderr")
    added = re.search(r"usage table: \S+ \((\d+) rows added in 1 days; (\d+) problems\)", done.stdout)
    assert added and int(added[1]) == file_rows + topic_rows, done.stdout
    assert int(added[2]) == 1 and "broken.jsonl: 1 × malformed record" in done.stderr, done.stderr[-3000:]
    assert f"report: {base}/work/report.html" in done.stdout, done.stdout

    check = run_python(
        [
            "-c",
            CHECK_ON_THE_CLUSTER,
            standalone_cluster.url,
            json.dumps(conf),
            base,
            kafka.bootstrap,
            topic,
        ],
        CHECK_TIMEOUT_S,
        tmp_path,
    )
    lines = [line for line in check.stdout.splitlines() if line.startswith("RESULT ")]
    assert check.returncode == 0 and lines, failure(check, tmp_path / "check.stderr")
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["again"] == [0, 0], "ingesting the same files and topic again adds nothing"
    assert result["rows"] == file_rows + topic_rows and result["executors"] == 2, result
    assert result["missing"] == [] and result["report"] > 10_000, result
    quotas = {entry["client_id"] for entry in tomllib.loads(result["toml"])["quotas"]}
    assert {"files-steady", "files-bursty", "files-v1", "topic-producer"} <= quotas, result["toml"]
    if hasattr(store, "stored_keys"):  # what the object store holds, as its S3 API lists it
        keys = store.stored_keys(run)
        assert any(key.endswith("work/report.html") for key in keys), keys
        assert any("/work/usage-table/_delta_log/" in key for key in keys), keys
