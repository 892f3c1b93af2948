#!/usr/bin/env python3
"""The proxy's Python cost per request, without sockets: µs per request/response exchange.

Drives a client connection and its upstream pair in-process (tests/in_process.py) through the
exchanges the socket benchmarks make, with the configs they use (no quota; quotas not binding), and
with producer_ids_rate set too (KIP-936: every produce hooked, its producer ID read):

- produce: a Produce v9 request (one 100-byte record batch, acks=1) and its response, the
  small-requests workload's exchange;
- metadata: ApiVersions v3 then Metadata v4, alternately, the 200-connections workload's exchange;
- fetch: a Fetch v12 request and a 1 MB response arriving in 64 KiB reads (cut through).

Each also with the client a tenant's member (quotas not binding, its own and its tenant's), and the
charges alone: an exchange's charge_request and charge_response on an entity's buckets, in no tenant
and a member (`charges_us`).

The socket workloads add the syscalls (about half of their proxy CPU); this isolates the other half,
deterministically enough to compare two versions of the code. Figures only, nothing asserted.

Then the cost of usage records on the produce and metadata exchanges (quotas not binding): off,
one v1 record per request (JSONL), and v2 aggregates (Parquet). The flush work the proxy does in
its flush (the recorder's take_records, the columns with their quota fields and their encoding, slice by
slice, and the file write) is counted too, every 10 000 exchanges, since it is CPU the proxy process pays.
The figures, and the usage ones over usage off, go to bench/results/hot_path.json
(`usage.produce.usage_off_us`, `.aggregates_us`, `.per_request_us`, ...).

    .venv/bin/python -m bench.hot_path [--exchanges N] [--profile produce] [--out FILE] [--charges-only]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from struct import pack

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from quotagate.proxy.usage import SLICE_ROWS, QuotasInForce, UsageRecorder, make_sink
from tests.support.in_process import connected_pair
from tests.support.messages import produce_response

NON_BINDING_VALUES = "producer_byte_rate = 1e10\nconsumer_byte_rate = 1e10\nrequest_percentage = 10000\n"
NON_BINDING = '[[quotas]]\nuser = "<default>"\nclient_id = "<default>"\n' + NON_BINDING_VALUES
# producer_ids_rate (KIP-936) set too: every produce is hooked and its producer ID (seen after the
# first) looked up in the entity's Bloom filters.
PRODUCER_IDS = NON_BINDING + "producer_ids_rate = 1000\n"
# The bench client a tenant's member too: every charge goes to its own bucket and its tenant's.
TENANT_MEMBER = NON_BINDING + '[[tenants]]\nname = "bench"\nclient_ids = ["bench-client"]\n' + NON_BINDING_VALUES
CONFIGS = {
    "no_quota": "",
    "quotas_not_binding": NON_BINDING,
    "producer_ids_rate": PRODUCER_IDS,
    "tenant_member": TENANT_MEMBER,
}
# A RecordBatch v2 header from producer 4242 and 39 bytes standing for its records: 100 bytes.
RECORD_BATCH = pack(">qiibIhiqqqhii", 0, 88, 0, 2, 0, 0, 0, 0, 0, 4242, 0, 0, 1) + b"r" * 39


def framed(message, correlation_id: int = 1) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id="bench-client")
    return bytes(message.encode(header=True, framed=True))


def response_frame(correlation_id: int, body: bytes, flexible: bool) -> bytes:
    payload = pack(">i", correlation_id) + (b"\x00" if flexible else b"") + body
    return pack(">i", len(payload)) + payload


def produce_exchange() -> list[tuple[bytes, list[bytes]]]:
    request = framed(
        ProduceRequest(
            version=9, transactional_id=None, acks=1, timeout_ms=1000, topic_data=[("bench-small", [(0, RECORD_BATCH)])]
        )
    )
    body = bytes(produce_response(9, 0, topics=1, partitions=1).encode())
    return [(request, [response_frame(1, body, True)])]


def metadata_exchange(broker_metadata: bytes, broker_api_versions: bytes) -> list[tuple[bytes, list[bytes]]]:
    api_versions = framed(ApiVersionsRequest(version=3, client_software_name="b", client_software_version="1"))
    metadata = framed(MetadataRequest(version=4, topics=[], allow_auto_topic_creation=False))
    return [(api_versions, [broker_api_versions]), (metadata, [broker_metadata])]


def fetch_exchange() -> list[tuple[bytes, list[bytes]]]:
    # header v2, then replica_id, max_wait_ms, min_bytes, max_bytes; the rest is never read by the proxy
    payload = pack(">hhih", 1, 12, 1, 12) + b"bench-client" + b"\x00" + pack(">iiii", -1, 500, 1, 52428800)
    request = pack(">i", len(payload) + 16) + payload + b"\x00" * 16
    # throttle_time_ms, error_code, session_id, then what stands for 1 MB of record data
    response = response_frame(1, pack(">ihi", 0, 0, 0) + b"\x00" * 1_000_000, True)
    reads = [response[i : i + 65536] for i in range(0, len(response), 65536)]
    return [(request, reads)]


USAGE_CONFIGS = {  # name in the table, key in the JSON: config
    ("usage_off", "usage_off_us"): "",
    ("per_request_jsonl", "per_request_us"): '[usage]\nenabled = true\nsink = "jsonl"\nrecords = "request"\n',
    ("aggregates_parquet", "aggregates_us"): "[usage]\nenabled = true\n",
}
RESULTS = Path(__file__).resolve().parent / "results"
FLUSH_EVERY = 10_000  # exchanges between two flushes: the 1 s flush of a proxy at 10 k requests/s


def run(config: str, exchange: list[tuple[bytes, list[bytes]]], count: int, profile: bool) -> float:
    """µs per request/response exchange, over `count` exchanges (after 2000 to warm up)."""

    async def main() -> float:
        with tempfile.TemporaryDirectory() as usage_dir:
            settings = config.replace("[usage]\n", f'[usage]\ndirectory = "{usage_dir}"\n')
            proxy = Proxy(parse_config('[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n' + settings))
            figure = measure(proxy)
            if proxy.usage is not None:
                await proxy.usage.sink.close()
            return figure

    def measure(proxy: Proxy) -> float:
        recorder = None
        if proxy.config.usage.enabled:  # before the pair: a session takes the recorder its services name
            usage = proxy.config.usage
            quotas = QuotasInForce(proxy.engine.table, proxy.engine.windows)  # as the proxy's own recorder
            recorder = proxy.usage = UsageRecorder(
                usage, proxy.metrics, make_sink(usage, "bench", []), "bench", "", quotas
            )
        client, upstream, _, _ = connected_pair(proxy, keep=False)
        sink_write = recorder.sink.write_blocking if recorder else None

        def flush() -> None:  # what UsageRecorder.flush does (encoded slice by slice, then written), here
            batch = recorder.take_records()[2]
            sink_write([recorder.sink.encode(batch.slice(i, i + SLICE_ROWS)) for i in range(0, len(batch), SLICE_ROWS)])

        def exchanges(n: int) -> None:
            for i in range(n):
                request, response_reads = exchange[i % len(exchange)]
                client.data_received(request)
                for read in response_reads:
                    upstream.data_received(read)
                if sink_write is not None and i % FLUSH_EVERY == FLUSH_EVERY - 1:
                    flush()

        exchanges(2000)
        profiler = cProfile.Profile() if profile else None
        started = time.process_time()  # CPU, not wall: time spent descheduled on the shared machine is not the code's
        if profiler:
            profiler.enable()
        exchanges(count)
        elapsed = time.process_time() - started
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return elapsed / count * 1e6

    return asyncio.run(main())


def charges(config: str, count: int) -> float:
    """µs for one produce exchange's charges alone (charge_request, then charge_response with its
    request time), on the buckets of the bench client under `config`, in the build that runs."""
    from quotagate import compiled
    from quotagate.quotas import QuotaEngine
    from quotagate.quotas.apis import policy
    from quotagate.quotas.entities import ANONYMOUS

    charging = compiled.load("quotagate.quotas.charging")
    settings = parse_config('[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n' + config)
    buckets = QuotaEngine(settings.quotas, settings.windows).entity_buckets(ANONYMOUS, "bench-client", 0.0)
    produce = policy(0)
    charge_request, charge_response = charging.charge_request, charging.charge_response
    started = time.process_time()
    for i in range(count):
        now = i * 1e-4
        charge_request(buckets, produce, 100, now)
        charge_response(buckets, produce, 50, 0.5, now)
    return (time.process_time() - started) / count * 1e6


def broker_answers() -> tuple[bytes, bytes]:
    """A Metadata v4 and an ApiVersions v3 answer as a broker gives them (one broker, every API)."""
    from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

    from quotagate.protocol.version_caps import MAX_VERSIONS

    metadata = MetadataResponse(
        version=4,
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(version=4, node_id=1, host="127.0.0.1", port=9092, rack=None)],
        cluster_id="bench",
        controller_id=1,
        topics=[],
    )
    key = ApiVersionsResponse.ApiVersion
    api_versions = ApiVersionsResponse(
        version=3,
        error_code=0,
        api_keys=[key(version=3, api_key=k, min_version=0, max_version=v) for k, v in sorted(MAX_VERSIONS.items())],
        throttle_time_ms=0,
    )
    return (
        response_frame(1, bytes(metadata.encode()), False),
        response_frame(1, bytes(api_versions.encode()), False),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=50_000)
    parser.add_argument("--profile", choices=("produce", "metadata", "fetch"), help="cProfile this one (quotas)")
    parser.add_argument("--profile-usage", choices=[name for name, _ in USAGE_CONFIGS], help="with these usage records")
    parser.add_argument("--out", type=Path, default=RESULTS / "hot_path.json")
    parser.add_argument("--charges-only", action="store_true", help="only the charges, printed (no file written)")
    args = parser.parse_args()
    results: dict = {"exchanges": args.exchanges, "load_average_before": list(os.getloadavg()), "exchange_us": {}}
    metadata, api_versions = broker_answers()
    workloads: dict[str, Callable[[], list[tuple[bytes, list[bytes]]]]] = {
        "produce": produce_exchange,
        "metadata": lambda: metadata_exchange(metadata, api_versions),
        "fetch": fetch_exchange,
    }
    charge_configs = {"no_tenant": NON_BINDING, "tenant_member": TENANT_MEMBER}
    if not args.charges_only:
        print(f"{'µs per exchange':<16}" + "".join(f"{name:>22}" for name in CONFIGS))
        for name, build in workloads.items():
            count = args.exchanges if name != "fetch" else max(args.exchanges // 20, 500)
            # min of 5: this machine's speed swings by up to 1.7x within seconds; the minimum is the code's cost
            figures = [min(run(config, build(), count, False) for _ in range(5)) for config in CONFIGS.values()]
            print(f"{name:<16}" + "".join(f"{figure:>22.2f}" for figure in figures))
            results["exchange_us"][name] = {
                config: round(figure, 3) for config, figure in zip(CONFIGS, figures, strict=True)
            }
    figures = [min(charges(config, args.exchanges * 4) for _ in range(5)) for config in charge_configs.values()]
    print(f"\n{'µs per charges':<16}" + "".join(f"{name:>22}" for name in charge_configs))
    print(f"{'produce':<16}" + "".join(f"{figure:>22.3f}" for figure in figures))
    results["charges_us"] = {name: round(figure, 4) for name, figure in zip(charge_configs, figures, strict=True)}
    if args.charges_only:
        return 0
    print(f"\n{'usage records':<16}" + "".join(f"{name:>22}" for name, _ in USAGE_CONFIGS))
    results["usage"] = {}
    for name in ("produce", "metadata"):
        figures = [
            min(run(NON_BINDING + config, workloads[name](), args.exchanges, False) for _ in range(5))
            for config in USAGE_CONFIGS.values()
        ]
        print(f"{name:<16}" + "".join(f"{figure:>22.2f}" for figure in figures))
        usage = {key: round(figure, 3) for (_, key), figure in zip(USAGE_CONFIGS, figures, strict=True)}
        usage["aggregates_over_off"] = round(usage["aggregates_us"] / usage["usage_off_us"], 3)
        usage["per_request_over_off"] = round(usage["per_request_us"] / usage["usage_off_us"], 3)
        results["usage"][name] = usage
    results["load_average_after"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {args.out} (load average {results['load_average_before'][0]:.2f} before, "
          f"{results['load_average_after'][0]:.2f} after)")  # fmt: skip
    if args.profile:
        usage_config = dict((name, config) for (name, _), config in USAGE_CONFIGS.items())
        run(NON_BINDING + usage_config.get(args.profile_usage, ""), workloads[args.profile](), args.exchanges, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
