"""A rolling restart of two replicas behind a layer-4 balancer, under load (issue 30): every record a
producer had acknowledged is in Kafka afterwards, and the quota the replicas share through Redis
holds within ±10 % across both restarts.

The layout of docs/deployment.md on one machine: replicas A and B listen on 127.0.0.2 and 127.0.0.3
with the same ports and advertise 127.0.0.1, where the balancer listens on those ports too and
gives each new connection to the next replica that accepts it (as kube-proxy or an NLB whose health
check has marked a stopped replica down). Real Kafka, real Redis, real quotagate processes, a real
idempotent confluent-kafka producer with acks=all."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.support.kafka_helpers import create_topic, unique_topic, wait_until
from tests.support.proxy_fixtures import REPO_ROOT, free_port_block

REPLICA_HOSTS = ("127.0.0.2", "127.0.0.3")
BALANCER_HOST = "127.0.0.1"
QUOTA = 200_000  # bytes/s, shared by the two replicas
RECORD = 1000
SECONDS = 36.0
RESTARTS_AT = (8.0, 20.0)  # A, then B


class Balancer:
    """A layer-4 balancer on BALANCER_HOST: each port forwards to the same port of the next replica
    that accepts the connection; bytes are copied unchanged both ways. Runs its own loop in a thread."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.loop = asyncio.new_event_loop()
        self.turn = 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the balancer did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        servers = [
            self.loop.run_until_complete(asyncio.start_server(self._forward_for(port), BALANCER_HOST, port))
            for port in self.ports
        ]
        self.servers = servers
        self.ready.set()
        self.loop.run_forever()

    def _forward_for(self, port: int):  # type: ignore[no-untyped-def]
        async def forward(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
            for attempt in range(len(REPLICA_HOSTS)):
                host = REPLICA_HOSTS[(self.turn + attempt) % len(REPLICA_HOSTS)]
                try:
                    replica_reader, replica_writer = await asyncio.open_connection(host, port)
                except OSError:
                    continue  # stopped, or not listening yet: the next replica
                self.turn += 1
                await asyncio.gather(
                    self._copy(client_reader, replica_writer), self._copy(replica_reader, client_writer)
                )
                return
            client_writer.close()

        return forward

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        def close() -> None:
            for server in self.servers:
                server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(close)
        self.thread.join(10)


class Replica:
    def __init__(self, name: str, host: str, workdir: Path, config: str) -> None:
        self.name = name
        self.folder = workdir / name
        self.folder.mkdir()
        self.config_path = self.folder / "quotagate.toml"
        self.config_path.write_text(config.replace("LISTEN_HOST", host))
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.folder / f"quotagate-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "quotagate", "--log-level", "DEBUG", "run", "--config", str(self.config_path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        wait_until(lambda: "quotagate ready" in self.log_path.read_text(), 20, f"replica {self.name} ready")
        wait_until(lambda: "serving broker" in self.log_path.read_text(), 20, f"replica {self.name}'s broker listener")

    def stop(self) -> None:
        """SIGTERM, as Kubernetes sends it: the replica drains and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            assert self.process.returncode == 0, f"replica {self.name} exited {self.process.returncode}"


@pytest.fixture
def replicas(kafka, redis_server, tmp_path: Path) -> Iterator[tuple[list[Replica], Balancer, int]]:
    first = free_port_block(14)
    config = (
        "quota_window_num = 1\n"
        f'[proxy]\nbootstrap_servers = ["{kafka.bootstrap}"]\nlisten_host = "LISTEN_HOST"\n'
        f'advertised_host = "{BALANCER_HOST}"\nport = {first}\nbroker_port_base = {first + 1}\n'
        f'[metrics]\nhost = "LISTEN_HOST"\nport = {first + 11}\n'
        f'[cluster]\nredis_url = "{redis_server.url}"\nprocesses = 2\n'
        f'[[quotas]]\nclient_id = "rolling"\nproducer_byte_rate = {QUOTA}\n'
    )
    group = [Replica(name, host, tmp_path, config) for name, host in zip("AB", REPLICA_HOSTS, strict=True)]
    balancer = Balancer([first, first + 1 + 1])  # bootstrap, and broker node 1 (the test Kafka's)
    try:
        for replica in group:
            replica.start()
        yield group, balancer, first
    finally:
        balancer.stop()
        for replica in group:
            replica.stop()


@pytest.mark.long_only
def test_a_rolling_restart_under_load_loses_no_acknowledged_record_and_keeps_the_quota(replicas, kafka) -> None:
    group, _balancer, port = replicas
    topic = unique_topic("rolling")
    create_topic(kafka.bootstrap, topic, partitions=1)
    acked: list[tuple[float, bytes]] = []  # (when, key) of every acknowledged record
    lock = threading.Lock()
    start = time.monotonic()

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": f"{BALANCER_HOST}:{port}",
                "client.id": "rolling",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 16384,
                "queue.buffering.max.kbytes": 256,
                "reconnect.backoff.max.ms": 500,
            }
        )
        value = os.urandom(RECORD)

        def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                with lock:
                    acked.append((time.monotonic(), msg.key()))

        sequence = 0
        while time.monotonic() - start < SECONDS:
            try:
                producer.produce(topic, key=str(sequence).encode(), value=value, on_delivery=delivered)
                sequence += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(60)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    for replica, at in zip(group, RESTARTS_AT, strict=True):
        time.sleep(max(0.0, start + at - time.monotonic()))
        replica.stop()
        replica.start()
    thread.join(120)
    assert not thread.is_alive(), "the producer did not finish"

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": unique_topic("rolling-check"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    stored: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(stored) < len(acked) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            stored.add(message.key())
    consumer.close()
    lost = {key for _, key in acked} - stored
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records are not in Kafka"

    # The quota over the whole run: the rate, plus one burst (quota_window_num = 1: one second of quota).
    elapsed = max(at for at, _ in acked) - start
    allowed = QUOTA * elapsed + QUOTA
    produced = len(acked) * RECORD
    print(f"{len(acked)} records acknowledged in {elapsed:.1f} s: {produced / elapsed:.0f} B/s, quota {QUOTA} B/s")
    assert produced == pytest.approx(allowed, rel=0.10), f"{produced} B acknowledged, the quota allows {allowed:.0f}"
    for replica in group:
        assert replica.starts == 2 and "shutting down" in (replica.folder / "quotagate-1.log").read_text()
