"""The pipeline on a real standalone Spark cluster: a master and two workers started from the
PySpark distribution on 127.0.0.1 (random free ports), stopped by pid at the end. The what-if job
runs on the workers' executors, with quotagate shipped to them as a zip (session.package_zip).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proxy_fixtures import free_port_block


def spark_class(*args: str, log: Path) -> subprocess.Popen[bytes]:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    return subprocess.Popen(
        [str(home / "bin" / "spark-class"), *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def wait_for(log: Path, text: str, process: subprocess.Popen[bytes], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"{log.name}: no {text!r} within {seconds} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def standalone_master(tmp_path: Path) -> Iterator[str]:
    port = free_port_block(4)
    processes = []
    try:
        master_log = tmp_path / "master.log"
        master = spark_class(
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(port + 1)),
            log=master_log,
        )
        processes.append(master)
        wait_for(master_log, "I have been elected leader", master)
        url = f"spark://127.0.0.1:{port}"
        # Both workers start at once (two JVM start-ups overlap instead of following each other).
        workers = []
        for index in range(2):
            worker_log = tmp_path / f"worker-{index}.log"
            worker = spark_class(
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(port + 2 + index)),
                *("--work-dir", str(tmp_path / f"work-{index}"), url),
                log=worker_log,
            )
            processes.append(worker)
            workers.append((worker_log, worker))
        for worker_log, worker in workers:
            wait_for(worker_log, "Successfully registered with master", worker)
        yield url
    finally:
        for process in reversed(processes):  # by pid (their own process groups), never by name
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


# Runs in its own process: one SparkContext per process, and the test session's is local.
ON_THE_CLUSTER = """
import json, sys
import pandas as pd
from quotagate.pipeline.session import create_session
from quotagate.pipeline.synthetic import SyntheticEntity, synthetic_requests
from quotagate.pipeline.whatif import whatif

spark = create_session(sys.argv[1], "quotagate-standalone-test",
                       {"spark.ui.enabled": "false", "spark.executor.memory": "512m", "spark.cores.max": "2"})
entities = [SyntheticEntity("u", "heavy", 200_000, 10), SyntheticEntity("u", "light", 50_000, 10)]
candidate = pd.DataFrame({"quota_key": ["producer_byte_rate"], "quota": [100_000.0]})
table = synthetic_requests(spark, entities, 30).repartition(4)
rows = {r["client_id"]: r["seconds_throttled"] for r in whatif(table, candidate).collect()}
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
print("RESULT " + json.dumps({"throttled": rows, "executors": executors}))
spark.stop()
"""


def test_whatif_runs_on_a_standalone_cluster_with_two_workers(standalone_master: str) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-c", ON_THE_CLUSTER, standalone_master], capture_output=True, text=True, timeout=280
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["executors"] == 2, result
    assert result["throttled"]["heavy"] > 10 and result["throttled"]["light"] == 0, result


def test_the_executors_run_quotagate_from_its_zip_interpreted(tmp_path: Path) -> None:
    """Executors get quotagate as a zip of its .py files (session.package_zip), where no extension
    module can be imported from: what the what-if job imports there runs interpreted (compiled.load
    falls back by itself) and comes from the zip alone."""
    from quotagate.pipeline.session import package_zip

    archive = package_zip()
    code = (
        "import sys\n"
        "import quotagate.pipeline.whatif, quotagate.pipeline.rollup\n"
        "from quotagate import compiled\n"
        "print('COMPILED', compiled.COMPILED)\n"
        "print('\\n'.join(f'{n} {m.__file__}' for n, m in sys.modules.items() if n.startswith('quotagate')))"
    )
    # The zip first on the path, as Spark puts a --py-files archive on an executor's
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": archive},
    )
    lines = done.stdout.splitlines()
    assert "COMPILED False" in lines, done.stdout
    modules = [line for line in lines if line.startswith("quotagate")]
    assert "quotagate.quotas.token_bucket" in {line.split(" ")[0] for line in modules}, modules
    outside = [line for line in modules if not line.split(" ", 1)[1].startswith(archive)]
    assert modules and outside == [], f"imported from outside the zip: {outside}"
