"""What an operator meets on the first day, against a real Kafka and a real proxy process: a reload
that names what it applied and what waits for a restart; the proxy run as the image runs it (an
unprivileged uid, a read-only config folder), writing only where it was told to."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until
from tests.support.proxy_fixtures import REPO_ROOT, ProxyProcess, free_port_block, port_is_free


def scrape(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def test_a_reload_logs_and_counts_the_keys_it_applied_and_those_that_wait_for_a_restart(proxy_factory, kafka) -> None:
    proxy = proxy_factory(kafka.bootstrap)
    assert "quotagate_config_restart_pending_keys 0.0" in scrape(proxy.metrics_port)
    text = proxy.config_path.read_text()
    edited = text.replace("metadata_refresh_seconds = 5", "metadata_refresh_seconds = 6")
    proxy.config_path.write_text('[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1048576\n' + edited)
    wait_until(lambda: "config reloaded" in proxy.log_text(), 10, "the edit reloaded")
    assert re.search(
        r"config reloaded from \S+: 1 changed keys applied \(quotas\); 1 wait for a restart "
        r"\(proxy.metadata_refresh_seconds\)",
        proxy.log_text(),
    ), proxy.log_text()[-2000:]
    assert "quotagate_config_restart_pending_keys 1.0" in scrape(proxy.metrics_port)
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/quotas", timeout=5) as answer:
        assert b"alice" in answer.read(), "the quota was not applied"


# ------------------------------------------------------------------- as the image runs it: uid 10001


IMAGE_UID = 10001  # the Dockerfile's `quotagate` user


def interpreter_for(uid: int) -> tuple[str, dict[str, str]] | None:
    """A Python this uid can run with this checkout's quotagate and the venv's packages, and its
    environment: the venv's own when the uid can reach it, else the system's of the same version
    (the venv's interpreter may live under a folder only root can enter, as /root/.pyenv here)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), sysconfig.get_paths()["purelib"]]),
        "PYTHONUNBUFFERED": "1",
        "HOME": "/nonexistent",
    }
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        check = [*as_user(uid), candidate, "-c", "import quotagate.proxy.server"]
        if subprocess.run(check, env=env, capture_output=True, cwd="/", check=False).returncode == 0:
            return candidate, env
    return None


def as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


@pytest.fixture
def image_layout() -> Iterator[tuple[Path, Path]]:
    """/etc/quotagate (root's, read-only for the proxy: compose mounts the file :ro) and
    /var/lib/quotagate (the proxy's volume), under a folder every uid may enter."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the proxy as an unprivileged uid")
    root = Path(tempfile.mkdtemp(prefix="quotagate-image-", dir="/tmp"))
    root.chmod(0o755)
    etc, data = root / "etc-quotagate", root / "var-lib-quotagate"
    etc.mkdir(mode=0o755)
    data.mkdir(mode=0o755)
    os.chown(data, IMAGE_UID, IMAGE_UID)
    try:
        yield etc, data
    finally:
        shutil.rmtree(root)


def image_config(bootstrap: str, first_port: int, admin_and_usage: str) -> str:
    return (
        f'[proxy]\nbootstrap_servers = ["{bootstrap}"]\nport = {first_port}\nbroker_port_base = {first_port + 1}\n'
        f"[metrics]\nport = {first_port + 11}\n"
        '[admin]\nalter_principals = ["ANONYMOUS"]\n' + admin_and_usage
    )


def test_as_the_images_unprivileged_user_with_a_read_only_config_folder(
    kafka, kafka_tool, image_layout: tuple[Path, Path]
) -> None:
    etc, data = image_layout
    found = interpreter_for(IMAGE_UID)
    if found is None:
        pytest.skip(f"no Python {sys.version_info[:2]} that uid {IMAGE_UID} can run with this checkout")
    python, env = found
    first = free_port_block(14)
    config = etc / "quotagate.toml"
    run = [*as_user(IMAGE_UID), python, "-m", "quotagate", "run", "--config", str(config)]

    # The defaults write beside the config: refused at start, naming the key, before any listener.
    config.write_text(image_config(kafka.bootstrap, first, "[usage]\nenabled = true\n"))
    refused = subprocess.run(run, env=env, cwd="/", capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2, refused.stderr
    assert f"admin.state_file: {etc} is not writable by this process (uid {IMAGE_UID}): Permission denied" in (
        refused.stderr
    ), refused.stderr
    assert port_is_free(first), "the bootstrap port was opened before the check"
    config.write_text(
        image_config(kafka.bootstrap, first, f'state_file = "{data}/quotas.json"\n[usage]\nenabled = true\n')
    )
    refused = subprocess.run(run, env=env, cwd="/", capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and f"usage.directory: {etc}/usage is not writable" in refused.stderr, refused.stderr

    # Explicit paths on the proxy's volume: the Admin API and usage records write there.
    config.write_text(
        image_config(
            kafka.bootstrap,
            first,
            f'state_file = "{data}/quotas.json"\n[usage]\nenabled = true\nsink = "jsonl"\nrecords = "request"\n'
            f'directory = "{data}/usage"\nflush_interval_seconds = 0.2\n',
        )
    )
    config.chmod(0o644)
    log_path = data.parent / "quotagate.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(run, env=env, cwd="/", stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "quotagate ready" in log_path.read_text(), 30, "the proxy ready as uid 10001")
        bootstrap = f"127.0.0.1:{first}"
        kafka_tool(
            "configs", "--bootstrap-server", bootstrap, "--alter", "--add-config", "producer_byte_rate=1048576",
            "--entity-type", "users", "--entity-name", "alice",
        )  # fmt: skip
        topic = unique_topic("image")
        create_topic(bootstrap, topic, partitions=1)
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": "image-app"})
        for index in range(20):
            producer.produce(topic, str(index).encode())
        assert producer.flush(20) == 0
    finally:
        process.send_signal(signal.SIGTERM)  # flushes the usage records
        process.wait(20)
    assert process.returncode == 0, log_path.read_text()[-3000:]
    state = data / "quotas.json"
    assert state.stat().st_uid == IMAGE_UID
    assert json.loads(state.read_text())["quotas"] == [
        {"user": "alice", "client_id": None, "values": {"producer_byte_rate": 1048576.0}}
    ]
    records = [json.loads(line) for path in (data / "usage").rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert any(r["client_id"] == "image-app" and r["api_key"] == 0 for r in records), f"{len(records)} records"
    assert sorted(p.name for p in etc.iterdir()) == ["quotagate.toml"], "the proxy wrote into its config folder"


# ------------------------------------------------------------------- a restart keeps the debts


def restarted(proxy: ProxyProcess) -> ProxyProcess:
    """The same configuration (and so the same ports and state file) in a new process."""
    proxy.stop()
    log_path = proxy.log_path.with_suffix(".restarted.log")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "quotagate", "--log-level", "DEBUG", "run", "--config", str(proxy.config_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    again = ProxyProcess(process, proxy.config_path, log_path, proxy.port, proxy.broker_port_base, proxy.metrics_port)
    wait_until(lambda: "quotagate ready" in again.log_text(), 20, "the proxy ready again")
    return again


def throttled_produce_responses(proxy: ProxyProcess, client_id: str) -> float:
    pattern = rf'^quotagate_throttled_responses_total\{{[^}}]*client_id="{client_id}",group="produce"[^}}]*\}} (\S+)'
    return sum(float(value) for value in re.findall(pattern, scrape(proxy.metrics_port), re.M))


def test_a_restart_keeps_a_clients_debt(proxy_factory, kafka) -> None:
    # 50 kB/s with the default 11 windows: a 550 kB burst. One 900 kB batch leaves ~350 kB of debt (7 s).
    proxy = proxy_factory(kafka.bootstrap, '[[quotas]]\nclient_id = "restart-app"\nproducer_byte_rate = 50000\n')
    topic = unique_topic("restart")
    create_topic(kafka.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "restart-app", "linger.ms": 200})
    for _ in range(9):
        producer.produce(topic, b"x" * 100_000)
    assert producer.flush(30) == 0
    assert throttled_produce_responses(proxy, "restart-app") >= 1
    again = restarted(proxy)  # SIGTERM: the levels are saved as the proxy stops
    try:
        assert re.search(r"restored 1 of 1 bucket levels saved \d+ s ago", again.log_text()), again.log_text()[-2000:]
        producer = Producer({"bootstrap.servers": again.bootstrap, "client.id": "restart-app", "linger.ms": 0})
        producer.produce(topic, b"small")
        assert producer.flush(30) == 0
        # A fresh process with a full bucket would not throttle 5 bytes: the debt came through the restart.
        wait_until(lambda: throttled_produce_responses(again, "restart-app") >= 1, 10, "the small produce throttled")
    finally:
        again.stop()


# ------------------------------------------------------------------- the README's first run, as typed


def readme_first_run() -> list[str]:
    """The commands of the README's "First run" block, one per line as a newcomer types them."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## First run", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readmes_first_run_works_as_typed_with_records_piped_into_the_console_producer(
    kafka, tmp_path: Path
) -> None:
    """Issue 34, item 10: `python -m kafka_rig tool` ran tools with stdin from /dev/null, so the
    README's console producer read nothing and exited 0. Every command of the block is run as
    written, from the checkout, with only the addresses moved to this test's broker and ports (the
    example's 9092, 9192/9193, 9190, and its topic): records piped into the producer come back
    through the proxy, and the metrics show the requests."""
    first = free_port_block(14)
    topic = unique_topic("hello")
    example = (REPO_ROOT / "examples" / "quotagate.toml").read_text()
    moves = {
        "127.0.0.1:9092": kafka.bootstrap,
        "port = 9192": f"port = {first}",
        "broker_port_base = 9193": f"broker_port_base = {first + 1}",
        "port = 9190": f"port = {first + 11}",
    }
    for old, new in moves.items():
        assert old in example, f"examples/quotagate.toml no longer has {old!r}: update this test"
        example = example.replace(old, new)
    config = tmp_path / "quotagate.toml"
    config.write_text(example)
    commands = readme_first_run()
    assert len(commands) == 5, commands
    check, run, produce, consume, scrape_command = (
        command.replace("examples/quotagate.toml", str(config))
        .replace("127.0.0.1:9192", f"127.0.0.1:{first}")
        .replace("localhost:9190", f"localhost:{first + 11}")
        .replace("--topic hello", f"--topic {topic}")
        for command in commands
    )
    assert "check-config" in check and " run " in run and "curl" in scrape_command
    assert "console-producer" in produce and "console-consumer" in consume

    def shell(command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, timeout=180
        )

    checked = shell(check)
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stderr
    log_path = tmp_path / "quotagate.log"
    with log_path.open("wb") as log:
        proxy = subprocess.Popen(["bash", "-c", f"exec {run}"], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "quotagate ready" in log_path.read_text(), 30, "the proxy of the first run")
        records = ["first record", "second record", "third record"]
        produced = shell(produce, stdin="".join(f"{record}\n" for record in records))
        assert produced.returncode == 0, produced.stderr[-3000:]
        # The consumer runs until Ctrl-C when typed: here it stops once it has read the records back.
        consumed = shell(f"{consume} --max-messages {len(records)} --timeout-ms 60000")
        assert consumed.stdout.splitlines() == records, consumed.stdout + consumed.stderr[-3000:]
        scraped = shell(scrape_command)
        produce_requests = re.search(r'^quotagate_requests_total\{api_key="0"\} (\S+)', scraped.stdout, re.M)
        assert produce_requests and float(produce_requests.group(1)) >= 1, scraped.stdout
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(30)
    assert proxy.returncode == 0, log_path.read_text()[-3000:]
