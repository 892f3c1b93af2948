#!/usr/bin/env python3
"""Instructions per exchange under callgrind: the hot path's cost, steady whatever the machine's load.

`bench/hot_path.py` times the in-process exchanges in µs, which swing with the load of a shared
machine; callgrind counts the instructions they execute, which do not. Each case runs twice under
`valgrind --tool=callgrind` (PYTHONHASHSEED=0), with N and 2N exchanges after the same warm-up, and
the figure is the difference over N: start-up, imports and warm-up cancel out. The cases are
hot_path's exchanges (a Produce v9 of one 100-byte batch and its answer; ApiVersions v3 + Metadata
v4, alternately) with no quota, with quotas that never bind, and with usage records on (v2
aggregates, quotas not binding; no flush: its cost is hot_path's figure), and with the client a
tenant's member (quotas not binding: its own bucket and its tenant's charged). The glue's clock moves
100 us an exchange, so that what depends on time (usage windows) is the same in every run.

    .venv/bin/python -m bench.instructions [--exchanges 5000] [--cases produce/no_quota,...]

Needs valgrind (Debian's `valgrind`). Takes about a minute per case.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOADS = ("produce", "metadata")
CONFIGS = ("no_quota", "quotas_not_binding", "usage_aggregates", "tenant_member", "usage_per_request")
WARM_UP = 2000


def config_text(config: str) -> str:
    from bench.hot_path import NON_BINDING, TENANT_MEMBER, USAGE_CONFIGS

    usage = {name: text for (name, _), text in USAGE_CONFIGS.items()}
    return {
        "no_quota": "",
        "quotas_not_binding": NON_BINDING,
        "usage_aggregates": NON_BINDING + usage["aggregates_parquet"],
        "usage_per_request": NON_BINDING + usage["per_request_jsonl"],
        "tenant_member": TENANT_MEMBER,
    }[config]


def drive(workload: str, config: str, count: int) -> None:
    """Runs WARM_UP + count exchanges of `workload` under `config` (in the process valgrind runs)."""
    from bench.hot_path import broker_answers, metadata_exchange, produce_exchange
    from quotagate.config import parse_config
    from quotagate.proxy.server import Proxy
    from quotagate.proxy.usage import QuotasInForce, UsageRecorder, make_sink
    from tests.support.in_process import connected_pair

    exchange = produce_exchange() if workload == "produce" else metadata_exchange(*broker_answers())

    async def main() -> None:
        with tempfile.TemporaryDirectory() as usage_dir:
            settings = config_text(config).replace("[usage]\n", f'[usage]\ndirectory = "{usage_dir}"\n')
            proxy = Proxy(parse_config('[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n' + settings))
            if proxy.config.usage.enabled:
                usage = proxy.config.usage
                quotas = QuotasInForce(proxy.engine.table, proxy.engine.windows)
                proxy.usage = UsageRecorder(usage, proxy.metrics, make_sink(usage, "bench", []), "bench", "", quotas)
            client, upstream, _, _ = connected_pair(proxy, keep=False)
            # The glue's clock moves 100 us an exchange, whatever the machine's load: under callgrind a
            # run takes minutes, and a wall clock would add usage windows rolled over in proportion.
            start = asyncio.get_running_loop().time()
            ticks = [0]
            client.clock = lambda: start + ticks[0] * 1e-4
            for i in range(WARM_UP + count):
                ticks[0] = i
                request, reads = exchange[i % len(exchange)]
                client.data_received(request)
                for read in reads:
                    upstream.data_received(read)
            if proxy.usage is not None:
                await proxy.usage.sink.close()

    asyncio.run(main())


def instructions(workload: str, config: str, count: int) -> int:
    """Instructions callgrind counts for a whole run of `count` exchanges."""
    with tempfile.TemporaryDirectory() as out:
        log = Path(out) / "callgrind.log"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.out", f"--log-file={log}",
             sys.executable, "-m", "bench.instructions", "--drive", workload, config, str(count)],
            check=True, env=env, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        found = re.search(r"Collected : (\d+)", log.read_text())
        if found is None:
            raise RuntimeError(f"no instruction count in {log.read_text()}")
        return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=5000, help="N: the runs make N and 2N exchanges")
    parser.add_argument("--cases", default=",".join(f"{w}/{c}" for w in WORKLOADS for c in CONFIGS[:4]))
    parser.add_argument("--drive", nargs=3, metavar=("WORKLOAD", "CONFIG", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        workload, config, count = args.drive
        drive(workload, config, int(count))
        return 0
    print(f"instructions per exchange ({args.exchanges} and {2 * args.exchanges} exchanges, difference over N; "
          f"load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    for case in args.cases.split(","):
        workload, config = case.split("/")
        once = instructions(workload, config, args.exchanges)
        twice = instructions(workload, config, 2 * args.exchanges)
        print(f"{case:<36}{(twice - once) / args.exchanges:>10.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
