"""The proxy's memory with usage records on (issue 35): RSS, and what holds it, per configuration.

Starts quotagate (a subprocess, from --tree: this checkout by default, another one to compare) in
front of a broker double that answers each Produce v9 at once, under quotas that never bind, and
has CONNECTIONS clients, each with a client id of its own, send produce requests (one 100-byte
record batch to a topic of their own, one at a time per connection) for --seconds. Samples the
proxy's VmRSS every 5 s and reports, per configuration (usage off, v2 aggregates to Parquet, v1
records to JSONL): the RSS once started, at the end, its peak (VmHWM), the anonymous and
file-backed parts (RssAnon, RssFile: a shared library's pages count in the latter) and the
requests/s. Loopback only, ports 27000-27099 unless --port-base; figures only, no assertion.

    .venv/bin/python -m bench.usage_memory [--seconds 60] [--tree DIR] [--configs off,aggregates]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.hot_path import NON_BINDING, produce_exchange

CONNECTIONS = 8
CONFIGS = {
    "off": "",
    "aggregates": '[usage]\nenabled = true\ndirectory = "{dir}"\n',
    "per_request": '[usage]\nenabled = true\nrecords = "request"\nsink = "jsonl"\ndirectory = "{dir}"\n',
}
REPO = Path(__file__).resolve().parents[1]


def status(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile of `pid`, in MB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


async def answering_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with the produce exchange's response under its correlation id."""
    response = produce_exchange()[0][1][0]
    try:
        while True:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            request = await reader.readexactly(size)
            writer.write(response[:4] + request[4:8] + response[8:])
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def client(port: int, number: int, until: float, counts: list[int]) -> None:
    request = produce_exchange()[0][0]
    # its own client id and topic, the same lengths as the exchange's ("bench-client", "bench-small")
    request = request.replace(b"bench-client", f"client{number:06d}".encode()).replace(
        b"bench-small", f"topic{number:06d}".encode()
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    while time.monotonic() < until:
        writer.write(request[:8] + struct.pack(">i", sent) + request[12:])
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        sent += 1
    counts[number] = sent
    writer.close()


async def measure(name: str, toml: str, tree: Path, seconds: float, port_base: int) -> dict:
    broker_port, proxy_port, metrics_port = port_base, port_base + 1, port_base + 30
    server = await asyncio.start_server(answering_broker, "127.0.0.1", broker_port)
    with tempfile.TemporaryDirectory() as workdir:
        config = Path(workdir) / "quotagate.toml"
        config.write_text(
            NON_BINDING
            + f'[proxy]\nbootstrap_servers = ["127.0.0.1:{broker_port}"]\nport = {proxy_port}\n'
            + f'broker_port_base = {port_base + 10}\nbroker_node_ids = [0, 9]\nclient_sasl = "none"\n'
            + f"[metrics]\nport = {metrics_port}\n"
            + toml.format(dir=Path(workdir) / "usage")
        )
        log = (Path(workdir) / "proxy.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "quotagate", "run", "--config", str(config)],
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(tree)},
        )
        try:
            deadline = time.monotonic() + 30
            while b"quotagate ready" not in (Path(workdir) / "proxy.log").read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((Path(workdir) / "proxy.log").read_text())
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)
            started = status(process.pid)
            counts = [0] * CONNECTIONS
            until = time.monotonic() + seconds
            clients = [asyncio.create_task(client(proxy_port, i, until, counts)) for i in range(CONNECTIONS)]
            samples = []
            while time.monotonic() < until:
                await asyncio.sleep(5.0)
                samples.append(status(process.pid)["VmRSS"])
            _, stuck = await asyncio.wait(clients, timeout=10.0)
            if stuck:
                raise RuntimeError(
                    f"{len(stuck)} clients unanswered:\n" + (Path(workdir) / "proxy.log").read_text()[-3000:]
                )
            await asyncio.sleep(2.0)  # a flush or two after the load
            end = status(process.pid)
        finally:
            process.terminate()
            process.wait(30)
            log.close()
            server.close()
            await server.wait_closed()
    return {
        "config": name,
        "rss_started_mb": started["VmRSS"],
        "rss_end_mb": end["VmRSS"],
        "rss_peak_mb": end["VmHWM"],
        "anon_end_mb": end["RssAnon"],
        "file_end_mb": end["RssFile"],
        "rss_samples_mb": samples,
        "requests_per_s": round(sum(counts) / seconds),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose quotagate runs")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--port-base", type=int, default=27000)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "usage_memory.json")
    args = parser.parse_args()
    results = {"tree": str(args.tree), "seconds": args.seconds, "load_average": os.getloadavg()[0], "runs": []}
    print(f"{'config':<14}{'started':>9}{'end':>8}{'peak':>8}{'anon':>8}{'file':>8}{'req/s':>9}  (MB)")
    for name in args.configs.split(","):
        figures = await measure(name, CONFIGS[name], args.tree.resolve(), args.seconds, args.port_base)
        results["runs"].append(figures)
        print(
            f"{name:<14}{figures['rss_started_mb']:>9}{figures['rss_end_mb']:>8}{figures['rss_peak_mb']:>8}"
            f"{figures['anon_end_mb']:>8}{figures['file_end_mb']:>8}{figures['requests_per_s']:>9}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
