"""The processes a bench run needs, and what it reads from /proc about them.

One Kafka broker serves every path, so the four paths compare the same broker, JVM and page cache:

- direct: the PLAINTEXT listener on 16092, advertised as itself;
- haproxy: a second PLAINTEXT listener, HAPROXY on 16094, advertised as 127.0.0.1:16300, the haproxy
  frontend. A Kafka broker answers Metadata with the advertised address of the listener the request
  came in on, so a client bootstrapped through haproxy is told to use haproxy for broker 1 and every
  byte it sends stays in the L4 path. (With one listener, Metadata would name 16092 and the client
  would leave haproxy after bootstrap: the haproxy figures would be the direct figures again.)
- quotagate (two processes: no quotas, and quotas that never bind): bootstrap to 16092; quotagate
  rewrites every broker address itself, so it needs no listener of its own on the broker.

Ports: Kafka 16092-16095 (controller 16093), proxies 16300-16399: below Linux's ephemeral range
(32768-60999), so no outgoing connection on a busy machine can hold one and make the bench fail with
"address already in use" (they were 39xxx until issue 26); clear of the test suite's 29092-29999
(plus QUOTAGATE_TEST_PORT_OFFSET), the demo's 19xxx and the soak's 25xxx.
Every process here is started by us and stopped by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafka_rig import Cluster, fresh_cluster, run_tool

REPO_ROOT = Path(__file__).resolve().parents[1]


HOST = "127.0.0.1"
KAFKA_PORT = 16092
CONTROLLER_PORT = 16093
# The broker's second client listener, the one haproxy forwards to (advertised as HAPROXY_PORT).
KAFKA_HAPROXY_LISTENER_PORT = 16094
HAPROXY_PORT = 16300
# A third listener for bench/ab.py's floor forwarder (advertised as FLOOR_PORT, the forwarder's own).
KAFKA_FLOOR_LISTENER_PORT = 16095
FLOOR_PORT = 16330
# Each quotagate: bootstrap on base, broker node N on base + N, metrics on base + 9.
QUOTAGATE_BASES = {"quotagate_no_quota": 16310, "quotagate_quota": 16320, "quotagate_usage": 16340}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TMPFS_WORKDIR = Path("/dev/shm/quotagate-bench-kafka")
SEGMENT_BYTES = 256 * 1024 * 1024
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Quotas on the default entities, far above anything this machine can move: every request goes
# through resolution, charging and the throttle check, and nothing is ever throttled.
NON_BINDING_QUOTA_VALUES = {
    "producer_byte_rate": 10_000_000_000,  # 10 GB/s
    "consumer_byte_rate": 10_000_000_000,
    "request_percentage": 10_000,  # 100 threads' worth of request time
}
# The same quotas as a file's entry, for the runs whose proxies share buckets through Redis
# (bench/shared.py), where every process must hold them from its start.
NON_BINDING_QUOTAS = '\n[[quotas]]\nuser = "<default>"\nclient_id = "<default>"\n' + "".join(
    f"{key} = {value}\n" for key, value in NON_BINDING_QUOTA_VALUES.items()
)


# How long the soak and chaos runs wait for their proxy: with the load average at 40 on the 2 cores
# (other suites running), its Python had not written a log line after 30 s.
PROXY_READY_SECONDS = 120.0


class BenchError(RuntimeError):
    """Something the bench needs did not come up."""


# --------------------------------------------------------------------------- /proc


def cpu_split(pid: int) -> tuple[float, float]:
    """utime and stime of a process (all its threads), in seconds: its own code, and the kernel's
    work on its behalf (syscalls, and the loopback TCP softirq run in its context)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    return sum(cpu_split(pid))


def _status_kb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return float(line.split()[1])
    return 0.0


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS:") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM:") / 1024


def busy_cpu_seconds_but_steal() -> float:
    """Busy CPU seconds of this machine's own work (user, nice, system, irq, softirq), from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def total_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine (all cores), from /proc/stat: user..steal minus idle, iowait."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


# --------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class BenchPath:
    """One way to reach the broker. pid: the proxy process in the path (None when direct)."""

    name: str
    bootstrap: str
    port: int
    pid: int | None = None
    metrics_port: int | None = None

    @property
    def is_quotagate(self) -> bool:
        return self.metrics_port is not None


# --------------------------------------------------------------------------- Kafka


def start_broker(workdir: Path | None = TMPFS_WORKDIR) -> Cluster:
    """A fresh single-node KRaft broker with the direct listener and the one haproxy forwards to.

    Its log lives on tmpfs (workdir) unless workdir is None (then .cache/kafka/run/bench, on disk).
    On disk, the kernel's writeback of the GBs a run writes stalls the broker for 50-400 ms at
    random moments: that lands on whichever path is running and swamps the sub-millisecond
    differences the latency test is after. Memory stays bounded by small segments and by the
    retention set on the topics (create_topics); old segments go within seconds."""
    listeners = (
        f"PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{CONTROLLER_PORT},"
        f"HAPROXY://{HOST}:{KAFKA_HAPROXY_LISTENER_PORT},FLOOR://{HOST}:{KAFKA_FLOOR_LISTENER_PORT}"
    )
    advertised = (
        f"PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{CONTROLLER_PORT},HAPROXY://{HOST}:{HAPROXY_PORT},"
        f"FLOOR://{HOST}:{FLOOR_PORT}"
    )
    overrides = {
        "listeners": listeners,
        "advertised.listeners": advertised,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,HAPROXY:PLAINTEXT,FLOOR:PLAINTEXT",
        "log.segment.bytes": str(SEGMENT_BYTES),
        "log.retention.check.interval.ms": "5000",
        "log.segment.delete.delay.ms": "1000",
    }
    return fresh_cluster(
        "bench", 1, KAFKA_PORT, workdir=workdir, controller_base_port=CONTROLLER_PORT, overrides=overrides
    )


# --------------------------------------------------------------------------- child processes


class Child:
    """A process we started, stopped by its pid (SIGTERM, then SIGKILL after a grace period)."""

    def __init__(
        self, name: str, cmd: list[str], log_path: Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env=env
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise BenchError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def _wait_port(port: int, child: Child, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise BenchError(f"{child.name}: port {port} not accepting after {timeout:.0f}s")


def listening(port: int) -> bool:
    """Whether something accepts connections on HOST:port."""
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
        return True
    return False


def run_in_workdir(
    prefix: str,
    ports: list[int],
    out: Path,
    run: Callable[[Path], dict[str, object]],
    print_summary: Callable[[dict[str, object]], None],
) -> int:
    """A soak or chaos run: refuses ports already taken, runs in a fresh temporary folder (removed
    when the run passed, kept and named otherwise), writes the results to `out` and prints them.
    The exit code: 0 when result["passed"]."""
    busy = [port for port in ports if listening(port)]
    if busy:
        raise BenchError(f"ports {busy} are in use: pick another --port-base")
    workdir = Path(tempfile.mkdtemp(prefix=f"quotagate-{prefix}-"))
    started = time.monotonic()
    try:
        result = run(workdir)
    except BaseException:
        print(f"logs kept in {workdir}", file=sys.stderr)
        raise
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print_summary(result)
    print("criteria:")
    for name, ok in result["checks"].items():  # type: ignore[attr-defined]
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    print(f"{prefix.upper()} {'PASSED' if result['passed'] else 'FAILED'}")
    print(f"results: {out} ({result['wall_seconds']} s)", flush=True)
    if result["passed"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs kept in {workdir}")
    return 0 if result["passed"] else 1


def haproxy_config() -> str:
    """TCP mode, one frontend per broker port (one broker here), nothing else.

    nbthread 1: quotagate is one event loop on one core, so haproxy gets one too; that is also
    haproxy's most CPU-efficient setting, the stricter baseline for the CPU-per-GB ratio. Timeouts
    are long so idle Kafka connections (the 200-connection test) are never cut by haproxy."""
    return f"""global
    nbthread 1
    maxconn 4000

defaults
    mode tcp
    timeout connect 5s
    timeout client 10m
    timeout server 10m

frontend kafka_broker_1
    bind {HOST}:{HAPROXY_PORT}
    default_backend kafka_broker_1

backend kafka_broker_1
    server broker1 {HOST}:{KAFKA_HAPROXY_LISTENER_PORT}
"""


def start_haproxy(workdir: Path) -> Child:
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(binary).exists():
        raise BenchError("haproxy is not installed: run `bash scripts/ensure_debian_tools.sh haproxy haproxy`")
    config = workdir / "haproxy.cfg"
    config.write_text(haproxy_config())
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        raise BenchError(f"haproxy rejects {config}:\n{check.stdout}{check.stderr}")
    # -db: foreground, no daemon and no master process, so the pid we hold is the one doing the work.
    child = Child("haproxy", [binary, "-db", "-f", str(config)], workdir / "haproxy.log")
    _wait_port(HAPROXY_PORT, child)
    return child


def quotagate_config(base: int, quotas: bool, usage_directory: Path | None = None) -> str:
    """A bench quotagate's configuration: with `quotas`, ANONYMOUS may set quotas through the Admin API
    (set_non_binding_quotas sets them once the proxy is up, as an operator does); with or without
    usage records (v2 aggregates to Parquet, the default an operator running the pipeline has)."""
    return (
        f'[proxy]\nbootstrap_servers = ["{HOST}:{KAFKA_PORT}"]\nlisten_host = "{HOST}"\n'
        f'advertised_host = "{HOST}"\nport = {base}\nbroker_port_base = {base}\nbroker_node_ids = [1, 8]\n'
        f'[metrics]\nhost = "{HOST}"\nport = {base + 9}\n'
        + ('[admin]\nalter_principals = ["ANONYMOUS"]\n' if quotas else "")
        + (f'[usage]\nenabled = true\ndirectory = "{usage_directory}"\n' if usage_directory is not None else "")
    )


def set_non_binding_quotas(bootstrap: str) -> None:
    """NON_BINDING_QUOTA_VALUES on the default (user, client-id) entity, set as operators set quotas:
    kafka-configs.sh against the proxy, which answers AlterClientQuotas itself and keeps them in its
    state file beside the configuration. Raises if the proxy does not then describe them."""
    entity = ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default"]
    settings = ",".join(f"{key}={value}" for key, value in NON_BINDING_QUOTA_VALUES.items())
    run_tool("configs", "--bootstrap-server", bootstrap, *entity, "--alter", "--add-config", settings)
    described = run_tool("configs", "--bootstrap-server", bootstrap, *entity, "--describe").stdout
    missing = [key for key in NON_BINDING_QUOTA_VALUES if f"{key}=" not in described]
    if missing:
        raise BenchError(f"the proxy at {bootstrap} does not describe {missing} after kafka-configs.sh set them")


def start_quotagate(workdir: Path, name: str, package_dir: Path | None = None) -> Child:
    """One bench quotagate from the venv, or from package_dir's copy of the package (a patch under test);
    its non-binding quotas (all but quotagate_no_quota) set through the Admin API."""
    base = QUOTAGATE_BASES[name]
    usage = workdir / f"{name}-usage" if name == "quotagate_usage" else None
    quotas = name != "quotagate_no_quota"
    config = quotagate_config(base, quotas=quotas, usage_directory=usage)
    child = launch_quotagate(workdir, name, config, base + 9, base + 1, package_dir)
    if quotas:
        try:
            set_non_binding_quotas(f"{HOST}:{base}")
        except BaseException:
            child.stop()
            raise
    return child


def launch_quotagate(
    workdir: Path,
    name: str,
    config_text: str,
    metrics_port: int,
    first_broker_port: int | None,
    package_dir: Path | None = None,
    log_level: str = "WARNING",
    ready_seconds: float = 30.0,
) -> Child:
    """quotagate with config_text, ready: /readyz answered 200 and the first broker's listener is open
    (first_broker_port None: not waited for; behind a SASL-only listener the proxy's own metadata
    requests are refused, and it learns the brokers from the first client's Metadata instead).

    It runs in workdir, not the repo: `python -m` puts the cwd first on the import path, which would
    shadow a PYTHONPATH copy with the repo's own quotagate/."""
    config = workdir / f"{name}.toml"
    config.write_text(config_text)
    cmd = [sys.executable, "-m", "quotagate", "--log-level", log_level, "run", "--config", str(config)]
    env = dict(os.environ)
    if package_dir is not None:
        if not (package_dir / "quotagate" / "__init__.py").exists():
            raise BenchError(f"{package_dir} has no quotagate package")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_dir.resolve()), env.get("PYTHONPATH")]))
    child = Child(name, cmd, workdir / f"{name}.log", cwd=workdir, env=env)
    try:
        deadline = time.monotonic() + ready_seconds
        while True:  # /readyz: listeners up and the broker answered the first metadata refresh
            child.check_alive()
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://{HOST}:{metrics_port}/readyz", timeout=1) as response:
                    if response.status == 200:
                        break
            if time.monotonic() > deadline:
                raise BenchError(f"{name} not ready after {ready_seconds:.0f}s; log: {child.log_path}")
            time.sleep(0.2)
        if first_broker_port is not None:
            _wait_port(first_broker_port, child)  # broker 1's listener, opened by the first refresh
    except BaseException:
        child.stop()
        raise
    return child


def create_topics(retention_bytes: dict[str, int]) -> None:
    """One partition each, created up front so that no measured run pays for auto-creation.

    retention.bytes bounds what each topic keeps (on tmpfs, that is memory)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{KAFKA_PORT}", client_id="bench-admin")
    try:
        admin.create_topics(
            [
                NewTopic(name, 1, 1, topic_configs={"retention.bytes": str(size)})
                for name, size in retention_bytes.items()
            ]
        )
    finally:
        admin.close()


def scrape(metrics_port: int) -> dict[str, float]:
    """quotagate's /metrics as {"name{labels}": value} (comments and blank lines dropped)."""
    with urllib.request.urlopen(f"http://{HOST}:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[key] = float(value)
    return values


def produce_requests(metrics: dict[str, float]) -> float:
    return metrics.get('quotagate_requests_total{api_key="0"}', 0.0)


def all_requests(metrics: dict[str, float]) -> float:
    return sum(value for key, value in metrics.items() if key.startswith("quotagate_requests_total{"))


def forwarded_bytes(metrics: dict[str, float]) -> float:
    return metrics.get('quotagate_bytes_total{direction="in"}', 0.0) + metrics.get(
        'quotagate_bytes_total{direction="out"}', 0.0
    )
