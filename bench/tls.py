#!/usr/bin/env python3
"""The cost of TLS through quotagate: produce throughput and the proxy's CPU, TLS on both sides
against plaintext on both sides, on one broker, in one run (the end of `make bench`).

Paths, interleaved in a rotated order inside each round (as bench/run.py does):
- direct, direct_tls: the Java producer to the broker's PLAINTEXT and SSL listeners (what TLS costs
  Kafka itself, for reference);
- quotagate, quotagate_tls: through a proxy with plaintext on both sides, and through one with
  [proxy.tls] to the client and [upstream.tls] (with a client certificate) to the broker's SSL
  listener, which requires client certificates.
Workload: ProducerPerformance, 1 KiB records, acks=1, as fast as it goes; the steady-state MB/s
(after a warm-up) and the proxy's CPU seconds per GB produced. Certificates are made with trustme.
Writes bench/results/tls-latest.json and prints the ratios. Figures only: nothing is asserted.

    python -m bench.tls            # 3 rounds of 400k records, ~4 min
    python -m bench.tls --quick    # 2 rounds of 100k records, ~2 min
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization

from bench import harness, workloads
from bench.harness import HOST, BenchPath, Child
from kafka_rig import Cluster, fresh_cluster, secure_listener_overrides

# Clear of bench/run.py's ports (16092-16095, 16300-16339) and of the test suite's; below the
# ephemeral range (bench/harness.py).
KAFKA_PORT, CONTROLLER_PORT, SASL_SSL_PORT, SSL_PORT = 16400, 16401, 16402, 16403
QUOTAGATE_BASES = {"quotagate": 16410, "quotagate_tls": 16420}
TOPIC = "bench-tls"
RESULTS = harness.REPO_ROOT / "bench" / "results" / "tls-latest.json"


def make_pki(directory: Path) -> dict[str, Path]:
    ca = trustme.CA()
    paths = {"ca": directory / "ca.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    for name in ("broker", "proxy", "client"):
        leaf = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
        paths[f"{name}_cert"], paths[f"{name}_key"] = directory / f"{name}.pem", directory / f"{name}.key"
        paths[f"{name}_cert"].write_bytes(chain)
        paths[f"{name}_key"].write_bytes(pkcs8)
        paths[f"{name}_keystore"] = directory / f"{name}-keystore.pem"  # key + chain, Kafka's PEM keystore
        paths[f"{name}_keystore"].write_bytes(pkcs8 + chain)
    return paths


def start_broker(pki: dict[str, Path]) -> Cluster:
    probe = Cluster.create("bench-tls", 1, KAFKA_PORT, controller_base_port=CONTROLLER_PORT)
    overrides = secure_listener_overrides(
        probe.nodes[0], SASL_SSL_PORT, SSL_PORT, pki["broker_keystore"], pki["ca"], {"bench": "bench-secret"}
    )
    overrides["log.segment.bytes"] = str(harness.SEGMENT_BYTES)
    return fresh_cluster(
        "bench-tls", 1, KAFKA_PORT, workdir=harness.TMPFS_WORKDIR.with_name("quotagate-bench-tls"),
        controller_base_port=CONTROLLER_PORT, overrides=overrides,
    )  # fmt: skip


def start_quotagate(workdir: Path, name: str, pki: dict[str, Path]) -> Child:
    base = QUOTAGATE_BASES[name]
    tls = name == "quotagate_tls"
    config = workdir / f"{name}.toml"
    text = (
        f'[proxy]\nbootstrap_servers = ["{HOST}:{SSL_PORT if tls else KAFKA_PORT}"]\nlisten_host = "{HOST}"\n'
        f"port = {base}\nbroker_port_base = {base}\nbroker_node_ids = [1, 8]\n[metrics]\nport = {base + 9}\n"
    )
    if tls:
        text += (
            f'[proxy.tls]\ncert = "{pki["proxy_cert"]}"\nkey = "{pki["proxy_key"]}"\n'
            f'[upstream.tls]\nca = "{pki["ca"]}"\ncert = "{pki["client_cert"]}"\nkey = "{pki["client_key"]}"\n'
        )
    config.write_text(text)
    cmd = [harness.sys.executable, "-m", "quotagate", "--log-level", "WARNING", "run", "--config", str(config)]
    child = Child(name, cmd, workdir / f"{name}.log", cwd=workdir)
    harness._wait_port(base + 1, child, timeout=30)  # broker 1's listener: the first refresh answered
    return child


def client_props(path: str, pki: dict[str, Path]) -> dict[str, str]:
    if not path.endswith("_tls"):
        return {}
    return {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki["ca"]),
        # The broker's SSL listener requires a client certificate; the proxy's does not ask for one.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["client_keystore"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rounds, records, warmup = (2, 100_000, 25_000) if args.quick else (3, 400_000, 100_000)
    workdir = Path(tempfile.mkdtemp(prefix="quotagate-bench-tls-"))
    pki = make_pki(workdir)
    raw: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        cluster = start_broker(pki)
        stack.callback(cluster.stop)
        proxies = {name: start_quotagate(workdir, name, pki) for name in QUOTAGATE_BASES}
        for child in proxies.values():
            stack.callback(child.stop)
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{KAFKA_PORT}", client_id="bench-admin")
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={"retention.bytes": str(512 * 1024 * 1024)})])
        admin.close()
        paths = [
            BenchPath("direct", f"{HOST}:{KAFKA_PORT}", KAFKA_PORT),
            BenchPath("direct_tls", f"{HOST}:{SSL_PORT}", SSL_PORT),
            *(BenchPath(name, f"{HOST}:{base}", base, proxies[name].pid) for name, base in QUOTAGATE_BASES.items()),
        ]
        for path in paths:  # warm-up: JIT, page cache, connections
            workloads.produce(path, TOPIC, 20_000, props=client_props(path.name, pki))
        for round_no in range(rounds):
            for path in paths[round_no % len(paths) :] + paths[: round_no % len(paths)]:
                cpu_before = harness.cpu_seconds(path.pid) if path.pid else 0.0
                out = workloads.produce(path, TOPIC, records, warmup=warmup, props=client_props(path.name, pki))
                cpu = harness.cpu_seconds(path.pid) - cpu_before if path.pid else None
                steady = out["steady"]
                assert isinstance(steady, dict)
                raw.setdefault(path.name, []).append(
                    {"mb_per_s": steady["mb_per_s"], "proxy_cpu_s": cpu, "gb": records * workloads.RECORD_SIZE / 1e9}
                )
                print(f"round {round_no + 1} {path.name}: {steady['mb_per_s']:.1f} MB/s", flush=True)
        for child in proxies.values():
            child.check_alive()
    summary: dict[str, Any] = {}
    for name, runs in raw.items():
        row = {"mb_per_s": round(statistics.median(r["mb_per_s"] for r in runs), 2)}
        if runs[0]["proxy_cpu_s"] is not None:
            row["proxy_cpu_s_per_gb"] = round(statistics.median(r["proxy_cpu_s"] / r["gb"] for r in runs), 2)
        summary[name] = row
    ratios = {
        "quotagate_tls_vs_plaintext_throughput": round(
            summary["quotagate_tls"]["mb_per_s"] / summary["quotagate"]["mb_per_s"], 3
        ),
        "quotagate_tls_vs_plaintext_cpu_per_gb": round(
            summary["quotagate_tls"]["proxy_cpu_s_per_gb"] / summary["quotagate"]["proxy_cpu_s_per_gb"], 3
        ),
        "direct_tls_vs_plaintext_throughput": round(
            summary["direct_tls"]["mb_per_s"] / summary["direct"]["mb_per_s"], 3
        ),
        "quotagate_tls_vs_direct_tls_throughput": round(
            summary["quotagate_tls"]["mb_per_s"] / summary["direct_tls"]["mb_per_s"], 3
        ),
    }
    results = {
        "mode": "quick" if args.quick else "full",
        "rounds": rounds,
        "records": records,
        "duration_s": round(time.monotonic() - started, 1),
        "paths": summary,
        "ratios": ratios,
        "raw": raw,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(f"{'path':<15} {'MB/s':>8} {'proxy CPU s/GB':>15}")
    for name, row in summary.items():
        print(f"{name:<15} {row['mb_per_s']:>8.1f} {row.get('proxy_cpu_s_per_gb', '-'):>15}")
    for name, value in ratios.items():
        print(f"{name}: {value}")
    print(f"wrote {args.out} in {results['duration_s']:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
