"""IBM/sarama's own functional quota test (TestFuncAdminQuotas) against a 3-broker Kafka, direct and
through quotagate (tests/integration/test_quota_admin_go_clients.py runs this, `make test-sarama-quotas`;
`make go-quota-clients` builds what it needs).

Sarama's functional suite wants its brokers behind a toxiproxy (TOXIPROXY_ADDR) at 127.0.0.1:29091-
29095, fixed ports, and topics of replication factor 3. Those ports belong to other checkouts' test
clusters on this machine, so everything runs in a network namespace of its own: run this module as
`unshare --net -- python tests/go/sarama_quotas.py OUT.json`. In it: loopback up, a 3-node KRaft
cluster, Shopify's toxiproxy server (built from its Go module), quotagate in front of the cluster, and
toxiproxy's kafka1-5 pointed at the brokers (direct) or at quotagate (through the proxy), the suite
run once each way. Every process it starts it stops; it writes each run's outcome and output as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kafka_rig import fresh_cluster  # noqa: E402

SUITES = ROOT / ".cache" / "go-quota-suites"
SARAMA_TEST = SUITES / "sarama_functional.test"
TOXIPROXY = SUITES / "bin" / "server"
TOXIPROXY_API = "http://127.0.0.1:8474"
BROKER_PORT = 29101  # nodes 29101-29103, controllers from 29201: free in this namespace
PROXY_PORT = 29300
KAFKA_VERSION = "4.2.0"


def toxiproxy(method: str, path: str, body: dict | None = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(TOXIPROXY_API + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        urllib.request.urlopen(request, timeout=10).read()
    except urllib.error.HTTPError as exc:
        if not (method == "DELETE" and exc.code == 404):
            raise


def point_proxies(upstreams: list[str]) -> None:
    """toxiproxy's kafka1-5, listening where sarama's suite connects, forwarding to `upstreams`."""
    for index in range(1, 6):
        toxiproxy("DELETE", f"/proxies/kafka{index}")
        upstream = upstreams[(index - 1) % len(upstreams)]
        toxiproxy("POST", "/proxies", {"name": f"kafka{index}", "listen": f"127.0.0.1:{29090 + index}",
                                       "upstream": upstream, "enabled": True})  # fmt: skip


def run_suite() -> dict:
    env = {**os.environ, "TOXIPROXY_ADDR": TOXIPROXY_API, "KAFKA_VERSION": KAFKA_VERSION}
    started = time.monotonic()
    done = subprocess.run(
        [str(SARAMA_TEST), "-test.run", "^TestFuncAdminQuotas$", "-test.v", "-test.count=1", "-test.timeout=300s"],
        cwd=SARAMA_TEST.parent, env=env, capture_output=True, text=True, timeout=360, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    return {
        "passed": done.returncode == 0 and "--- PASS: TestFuncAdminQuotas" in output,
        "seconds": round(time.monotonic() - started, 1),
        "output": output[-6000:],
    }


def main(out: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    workdir = Path(os.environ.get("SARAMA_WORKDIR", "/tmp/sarama-quotas"))
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = fresh_cluster("sarama-netns", 3, BROKER_PORT, controller_base_port=BROKER_PORT + 100)
    processes: list[subprocess.Popen] = []
    results = {}
    try:
        processes.append(subprocess.Popen([str(TOXIPROXY), "-host", "127.0.0.1", "-port", "8474"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        config = workdir / "quotagate.toml"
        servers = ", ".join(f'"{server}"' for server in cluster.bootstrap.split(","))
        config.write_text(
            f"[proxy]\nbootstrap_servers = [{servers}]\nport = {PROXY_PORT}\n"
            f"broker_port_base = {PROXY_PORT + 1}\n[metrics]\nport = {PROXY_PORT + 20}\n"
            '[admin]\nalter_principals = ["User:ANONYMOUS"]\n'
        )
        log = (workdir / "quotagate.log").open("wb")
        processes.append(subprocess.Popen([sys.executable, "-m", "quotagate", "run", "--config", str(config)],
                                          cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        deadline = time.monotonic() + 30
        while b"quotagate ready" not in (workdir / "quotagate.log").read_bytes():
            if time.monotonic() > deadline:
                raise RuntimeError("quotagate not ready: " + (workdir / "quotagate.log").read_text()[-2000:])
            time.sleep(0.2)
        point_proxies([f"127.0.0.1:{BROKER_PORT + node}" for node in range(3)])
        results["direct"] = run_suite()
        point_proxies([f"127.0.0.1:{PROXY_PORT}"])
        results["proxied"] = run_suite()
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        cluster.stop()
        out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
