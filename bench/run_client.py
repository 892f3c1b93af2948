"""One real Kafka client for the soak and chaos runs, as its own process, reporting as it goes.

    python bench/run_client.py KIND --bootstrap HOST:PORT --topic T [--user U] [...]

KIND is one of: kafka-python-producer, confluent-producer, confluent-consumer, aiokafka-consumer.
Every second (and once more at the end) it prints one JSON line to stdout with its cumulative
counts: records and payload bytes acknowledged (producers) or received (consumers), per topic
for consumers, and the errors it saw. SIGTERM stops it cleanly: producers flush what they sent
(bounded by --flush-seconds), consumers close; the last line has "final": true.

Producers write keys "<seq>" with increasing sequence numbers and, with --acked-file, write the
sequence numbers that were acknowledged to that file at the end (as [first, last] ranges), so the
chaos run can check every acknowledged record against what it reads back. Consumers with
--record-file write (partition, key) of every record they received, in the order received.

Runs on loopback only, for a bounded time (--seconds, or until SIGTERM), and never starts anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Tally:
    """What one client did so far; the printing thread and the client thread share it (a lock
    would protect nothing that matters: each counter is only written by the client thread)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.started = time.monotonic()
        self.records = 0
        self.bytes = 0
        self.errors = 0
        self.error_samples: list[str] = []
        self.per_topic: dict[str, int] = {}
        self.acked: list[int] = []

    def error(self, text: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(text[:300])

    def line(self, final: bool = False) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "t": round(time.monotonic() - self.started, 3),
                "records": self.records,
                "bytes": self.bytes,
                "errors": self.errors,
                "error_samples": self.error_samples,
                "per_topic": self.per_topic,
                "final": final,
            }
        )


def as_ranges(numbers: list[int]) -> list[list[int]]:
    """Sorted [first, last] runs of consecutive numbers: 240 000 acknowledged sequence numbers
    with a few gaps fit in a few lines."""
    ranges: list[list[int]] = []
    for number in sorted(numbers):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        elif not ranges or number > ranges[-1][1]:
            ranges.append([number, number])
    return ranges


def value_for(seq: int, size: int) -> bytes:
    head = f"{seq}:".encode()
    return head + b"x" * max(0, size - len(head))


class Pacer:
    """Sleeps as needed to keep `rate` sends per second (0: as fast as the client takes them)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.started = time.monotonic()

    def wait(self, sent: int) -> None:
        if self.rate > 0:
            ahead = sent / self.rate - (time.monotonic() - self.started)
            if ahead > 0:
                time.sleep(min(ahead, 0.1))


def sasl_confluent(args: argparse.Namespace) -> dict[str, str]:
    if not args.user:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": args.user,
        "sasl.password": args.password,
    }


def sasl_python(args: argparse.Namespace) -> dict[str, str]:
    """kafka-python's and aiokafka's names for the same settings."""
    if not args.user:
        return {}
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": args.user,
        "sasl_plain_password": args.password,
    }


def kafka_python_producer(args: argparse.Namespace, tally: Tally, stopping: threading.Event) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        client_id=args.client_id,
        acks=args.acks if args.acks == "all" else int(args.acks),
        linger_ms=5,
        **sasl_python(args),
    )
    # kafka-python 3 has no bound on what it buffers: hold back beyond --buffer-bytes unacknowledged.
    max_pending = max(1, args.buffer_bytes // args.record_size)

    def acked(seq: int, size: int) -> Callable[[Any], None]:
        def done(_metadata: Any) -> None:
            tally.records += 1
            tally.bytes += size
            tally.acked.append(seq)

        return done

    pacer = Pacer(args.rate)
    seq = 0
    while not stopping.is_set():
        value = value_for(seq, args.record_size)
        future = producer.send(args.topic, key=str(seq).encode(), value=value)
        future.add_callback(acked(seq, len(value)))
        future.add_errback(lambda exc: tally.error(repr(exc)))
        seq += 1
        pacer.wait(seq)
        while seq - tally.records - tally.errors > max_pending and not stopping.is_set():
            time.sleep(0.01)
    producer.flush(timeout=args.flush_seconds)
    producer.close(timeout=5)


def confluent_producer(args: argparse.Namespace, tally: Tally, stopping: threading.Event) -> None:
    from confluent_kafka import KafkaError, Producer

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": args.client_id,
            "acks": args.acks,
            "enable.idempotence": args.idempotent,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": max(1, args.buffer_bytes // 1024),
            "message.timeout.ms": int(args.flush_seconds * 1000),
            **sasl_confluent(args),
        }
    )

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            tally.records += 1
            tally.bytes += len(msg.value())
            tally.acked.append(int(msg.key()))
        else:
            tally.error(str(err))

    pacer = Pacer(args.rate)
    seq = 0
    while not stopping.is_set():
        try:
            producer.produce(
                args.topic, key=str(seq).encode(), value=value_for(seq, args.record_size), on_delivery=delivered
            )
        except BufferError:  # the local queue is full: let deliveries drain it, then retry this record
            producer.poll(0.05)
            continue
        seq += 1
        producer.poll(0)
        pacer.wait(seq)
    remaining = producer.flush(args.flush_seconds)
    if remaining:
        tally.error(f"{remaining} records still unacknowledged after {args.flush_seconds} s")


def confluent_consumer(args: argparse.Namespace, tally: Tally, stopping: threading.Event) -> None:
    from confluent_kafka import Consumer

    settings: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": args.client_id,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **sasl_confluent(args),
    }
    if args.fetch_max_wait_ms is not None:
        settings["fetch.wait.max.ms"] = args.fetch_max_wait_ms
    consumer = Consumer(settings)
    consumer.subscribe(args.topic.split(","))
    records: list[tuple[int, int]] = []
    while not stopping.is_set():
        for msg in consumer.consume(1000, timeout=0.2):
            error = msg.error()
            if error is not None:
                tally.error(str(error))
                continue
            value = msg.value() or b""
            tally.records += 1
            tally.bytes += len(value)
            tally.per_topic[msg.topic()] = tally.per_topic.get(msg.topic(), 0) + 1
            if args.record_file:
                records.append((msg.partition(), int(msg.key())))
    consumer.close()
    if args.record_file:
        Path(args.record_file).write_text(json.dumps(records))


def aiokafka_consumer(args: argparse.Namespace, tally: Tally, stopping: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer

    async def consume() -> None:
        consumer = AIOKafkaConsumer(
            *args.topic.split(","),
            bootstrap_servers=args.bootstrap,
            client_id=args.client_id,
            group_id=args.group,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=args.max_partition_fetch_bytes,
            fetch_max_bytes=args.max_partition_fetch_bytes,
            **sasl_python(args),
        )
        await consumer.start()
        try:
            while not stopping.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for partition, messages in batches.items():
                    tally.records += len(messages)
                    tally.bytes += sum(len(message.value or b"") for message in messages)
                    tally.per_topic[partition.topic] = tally.per_topic.get(partition.topic, 0) + len(messages)
        finally:
            await consumer.stop()

    asyncio.run(consume())


CLIENTS: dict[str, Callable[[argparse.Namespace, Tally, threading.Event], None]] = {
    "kafka-python-producer": kafka_python_producer,
    "confluent-producer": confluent_producer,
    "confluent-consumer": confluent_consumer,
    "aiokafka-consumer": aiokafka_consumer,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(CLIENTS))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True, help="consumers: comma-separated topics")
    parser.add_argument("--client-id", default="run-client")
    parser.add_argument("--group", default="run-client")
    parser.add_argument("--user", default="", help="SASL/PLAIN user (none: PLAINTEXT)")
    parser.add_argument("--password", default="")
    parser.add_argument("--acks", default="all")
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--rate", type=float, default=0.0, help="producers: records per second (0: unpaced)")
    parser.add_argument("--record-size", type=int, default=1024)
    # Small, so that a producer held to a quota flushes what it holds within --flush-seconds.
    parser.add_argument("--buffer-bytes", type=int, default=1048576, help="producers: send buffer")
    parser.add_argument("--fetch-max-wait-ms", type=int, default=None)
    parser.add_argument("--max-partition-fetch-bytes", type=int, default=1048576)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop by itself after this long")
    parser.add_argument("--flush-seconds", type=float, default=60.0)
    parser.add_argument("--acked-file", default="")
    parser.add_argument("--record-file", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tally = Tally(args.kind)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    deadline = threading.Timer(args.seconds, stopping.set)
    deadline.daemon = True
    deadline.start()

    def report() -> None:
        while not stopping.wait(1.0):
            print(tally.line(), flush=True)

    threading.Thread(target=report, daemon=True).start()
    try:
        CLIENTS[args.kind](args, tally, stopping)
    except Exception as exc:  # reported as the client's error, never a silent exit
        tally.error(f"{type(exc).__name__}: {exc}")
    stopping.set()
    if args.acked_file:
        Path(args.acked_file).write_text(json.dumps(as_ranges(tally.acked)))
    print(tally.line(final=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
