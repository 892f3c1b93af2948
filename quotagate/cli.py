"""Command line: `quotagate run --config FILE`, `quotagate check-config FILE` (validates the file and
prints the effective configuration), `quotagate probe --config FILE [--ready]` (a container health
check of the running proxy), `quotagate explain --user U --client-id C (--admin URL | --config FILE)`
(which quota applies to a client, and why), `quotagate top --url URL...` (a live view of running
proxies, with the `top` extra), `quotagate config-reference` (docs/configuration.md),
`quotagate metrics-reference` (docs/metrics.md), `quotagate pipeline JOB` (the usage pipeline on
Spark, with the `pipeline` extra) and `quotagate --version`."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotagate import __version__, compiled
from quotagate.config import ConfigError, load_config

if TYPE_CHECKING:
    from quotagate.proxy.server import Proxy


# A worker that exits is started again after this long, doubled at each exit in a row that came
# sooner than WORKER_STABLE_SECONDS after its start, up to WORKER_RESTART_MAX_SECONDS.
WORKER_RESTART_MIN_SECONDS = 1.0
WORKER_RESTART_MAX_SECONDS = 30.0
WORKER_STABLE_SECONDS = 60.0
WORKER_CHECK_SECONDS = 1.0


class Workers:
    """Worker 0's view of the other workers: their pids, and starting again one that exits (as
    nginx's master does). The first ones are forked before any event loop exists; one started again
    is a fresh `quotagate run --worker N`, never a fork of a process with a running loop."""

    def __init__(self, config_path: str, log_level: str) -> None:
        self.config_path = config_path
        self.log_level = log_level
        self.pids: dict[int, int] = {}  # worker number -> pid
        self.started: dict[int, float] = {}
        self.delays: dict[int, float] = {}

    def fork(self, count: int) -> None:
        import uvloop

        for worker in range(1, count):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = uvloop.run(_run(self.config_path, worker, None))
                finally:
                    os._exit(code)
            self.pids[worker] = pid
            self.started[worker] = time.monotonic()

    async def supervise(self) -> None:
        """Notices a worker that exited, says how, and starts it again (backing off while it keeps
        exiting), so the host keeps serving with every worker and each its 1/N of the quotas."""
        log = logging.getLogger("quotagate.workers")
        due: dict[int, float] = {}  # worker -> when to start it again
        while True:
            await asyncio.sleep(WORKER_CHECK_SECONDS)
            now = time.monotonic()
            for worker, pid in list(self.pids.items()):
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = pid, 0
                if done == 0:
                    continue
                del self.pids[worker]
                lived = now - self.started[worker]
                delay = WORKER_RESTART_MIN_SECONDS
                if lived < WORKER_STABLE_SECONDS:
                    delay = min(self.delays.get(worker, 0.0) * 2 or delay, WORKER_RESTART_MAX_SECONDS)
                self.delays[worker] = delay
                due[worker] = now + delay
                log.error(
                    "worker %d (pid %d) %s after %.0f s; starting it again in %.0f s",
                    worker, pid, _exit_description(status), lived, delay,
                )  # fmt: skip
            for worker, when in list(due.items()):
                if now >= when:
                    del due[worker]
                    self.pids[worker] = os.posix_spawn(
                        sys.executable,
                        [sys.executable, "-m", "quotagate", "--log-level", self.log_level, "run",
                         "--config", self.config_path, "--worker", str(worker)],
                        dict(os.environ),
                    )  # fmt: skip
                    self.started[worker] = time.monotonic()
                    log.warning("worker %d started again as pid %d", worker, self.pids[worker])

    def signal_all(self, signum: int) -> None:
        for pid in self.pids.values():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                continue

    def stop(self) -> None:
        """SIGTERM to every worker (each drains as on its own SIGTERM), then waits for them."""
        self.signal_all(signal.SIGTERM)
        for pid in self.pids.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                continue


def _exit_description(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


def _run_workers(config_path: str, log_level: str, worker: int | None) -> int:
    """Runs proxy.workers processes on the same ports: this one is worker 0 and supervises the
    others, which it stops (SIGTERM, by pid) when it stops. `worker`: run only that worker (one that
    worker 0 started again)."""
    import uvloop

    if worker is not None:
        return uvloop.run(_run(config_path, worker, None))
    from quotagate.config.quota_state import load_state
    from quotagate.config.written_paths import check_written_folders

    config = load_config(config_path)
    for key, folder in check_written_folders(config):  # before any worker or listener starts
        logging.getLogger("quotagate").info("%s: writing under %s", key, folder)
    load_state(Path(config.admin.state_file))  # a file no worker could start with: exit 2 before any forks
    workers = Workers(config_path, log_level)
    workers.fork(config.proxy.workers)
    try:
        return uvloop.run(_run(config_path, 0, workers))
    finally:
        workers.stop()


async def _exit_when_orphaned(proxy: Proxy, parent: int) -> None:
    """A worker whose worker 0 is gone stops too: nothing would supervise or reload it, and a new
    quotagate started by the service manager must not share the ports with leftovers."""
    while os.getppid() == parent:
        await asyncio.sleep(WORKER_CHECK_SECONDS)
    logging.getLogger("quotagate.workers").error("worker 0 (pid %d) is gone: stopping this worker", parent)
    await proxy.stop()


async def _run(config_path: str, worker: int, workers: Workers | None) -> int:
    from quotagate.proxy.server import Proxy

    config = load_config(config_path)
    proxy = Proxy(config, state_path=Path(config.admin.state_file), worker=worker)
    try:
        await proxy.start_admin_http()
        await proxy.start()
    except OSError as exc:
        print(f"quotagate: cannot listen: {exc}", file=sys.stderr)
        return 1
    watcher = proxy.watch_config(config_path)
    loop = asyncio.get_running_loop()
    # A failing stop() must not leave the process waiting forever: it exits non-zero instead.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: proxy.supervisor.start("shutdown", proxy.stop, restart=False))
    loop.set_exception_handler(lambda loop, context: _loop_error(proxy, context))

    def reload() -> None:
        watcher.reload()
        if workers is not None:
            workers.signal_all(signal.SIGHUP)  # the workers reload too

    loop.add_signal_handler(signal.SIGHUP, reload)
    background = []
    if workers is not None and workers.pids:
        background.append(proxy.supervisor.start("worker-supervision", workers.supervise))
    elif worker > 0:
        parent = os.getppid()
        background.append(proxy.supervisor.start("orphan-check", lambda: _exit_when_orphaned(proxy, parent)))
    # Everything allocated so far (modules, kafka-python's schema classes, the config) lives as long
    # as the process: move it out of the collector's sight. A full collection then scans only what
    # serving allocates, instead of pausing every connection for ~20-30 ms (measured on 2 cores).
    gc.collect()
    gc.freeze()
    logging.getLogger("quotagate").info("quotagate ready%s", f" (worker {worker})" if config.proxy.workers > 1 else "")
    await proxy.wait_stopped()
    for task in background:  # no worker is started again once this one stops
        task.cancel()
    return proxy.exit_code


def _loop_error(proxy: Proxy, context: dict[str, Any]) -> None:
    """What the event loop could not hand to anyone (a callback that raised, a task nobody awaited):
    logged with its traceback as asyncio would, and counted, never lost."""
    proxy.metrics.background_task_failures_total.labels("loop-callback").inc()
    asyncio.get_running_loop().default_exception_handler(context)


def _check_config(config_path: str) -> int:
    from quotagate.config.quota_state import load_state
    from quotagate.config.reference import effective_toml

    config = load_config(config_path)
    load_state(Path(config.admin.state_file))  # what `run` would refuse to start with
    given = tomllib.loads(Path(config_path).read_text(encoding="utf-8"))  # valid: load_config read it
    print(f"# {config_path}: OK. The effective configuration; keys marked default are not in the file.")
    print(effective_toml(config, given), end="")
    return 0


def _probe(config_path: str, ready: bool, timeout: float) -> int:
    """0 when the proxy configured by the file answers 200 on /healthz (/readyz with `ready`), else 1."""
    from quotagate.config.settings import WILDCARD_HOSTS

    metrics = load_config(config_path).metrics
    host = metrics.host if metrics.host not in WILDCARD_HOSTS else ("::1" if metrics.host == "::" else "127.0.0.1")
    url = f"http://{f'[{host}]' if ':' in host else host}:{metrics.port}/{'readyz' if ready else 'healthz'}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            print(f"{url}: {response.status} {response.read().decode(errors='replace').strip()}")
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{url}: {exc.code} {exc.read().decode(errors='replace').strip()}", file=sys.stderr)
    except OSError as exc:  # refused, timed out, unreachable
        print(f"{url}: {exc}", file=sys.stderr)
    return 1


def _explain(args: argparse.Namespace) -> int:
    """Prints why each quota applies to (user, client id): asked of a running proxy's /quotas/explain
    (with its buckets' state), or resolved from a configuration file and its state file (without)."""
    import json
    import urllib.parse

    from quotagate.quotas.explain import explain, explain_text

    if args.admin:
        query = {"user": args.user, "client_id": args.client_id, **({"ip": args.ip} if args.ip is not None else {})}
        url = f"{args.admin.rstrip('/')}/quotas/explain?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(url, timeout=args.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            print(f"{url}: {exc.code} {exc.read().decode(errors='replace').strip()}", file=sys.stderr)
            return 1
        except (OSError, ValueError) as exc:  # refused, timed out, not JSON
            print(f"{url}: {exc}", file=sys.stderr)
            return 1
    else:
        from quotagate.config.quota_state import load_state
        from quotagate.quotas import QuotaEngine
        from quotagate.quotas.admin import effective, source_of

        config = load_config(args.config)
        api_quotas = load_state(Path(config.admin.state_file))
        engine = QuotaEngine(effective(config.quotas, api_quotas), config.windows)
        answer = explain(
            engine, args.user, args.client_id, None, lambda entity, key: source_of(api_quotas, entity, key), args.ip
        )
    print(json.dumps(answer, indent=2) if args.json else explain_text(answer), end="\n" if args.json else "")
    return 0


def _top(args: argparse.Namespace) -> int:
    """The live view of the proxies at args.url: each is read once before the screen opens, so that a
    wrong address is an error naming it rather than an empty table."""
    from quotagate.top.rows import TopTable
    from quotagate.top.scrape import ProxyUnreachable, Scrape, scrape_all

    try:
        from quotagate.top.app import TopApp
    except ImportError as exc:
        print(f"quotagate top needs the top extra ({exc}): pip install 'quotagate[top]'", file=sys.stderr)
        return 2
    urls = list(dict.fromkeys(args.url))

    def poll() -> dict[str, Scrape | ProxyUnreachable]:
        return scrape_all(urls, args.timeout)

    first = poll()
    failed = [result for result in first.values() if isinstance(result, ProxyUnreachable)]
    for problem in failed:
        print(f"quotagate top: {problem}", file=sys.stderr)
    if failed:
        return 1
    table = TopTable(urls, args.sort)
    table.update(first)
    app = TopApp(table, poll, args.interval, Path(args.screenshot) if args.screenshot else None)
    if args.screenshot:
        app.run(headless=True, size=(args.width, args.height))
    else:
        app.run()
    return app.return_code or 0


def _positive(text: str) -> float:
    value = float(text)
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


class _Version(argparse.Action):
    """--version: the package's version, then `core: compiled` or `core: pure Python` (quotagate/compiled.py)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"quotagate {__version__}\ncore: {compiled.core_build()}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quotagate", description=__doc__)
    parser.add_argument("--version", action=_Version, help="the version, and whether the exchange core is compiled")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the proxy")
    run.add_argument("--config", required=True, help="the TOML configuration file")
    run.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # worker 0 starting one again
    check = commands.add_parser(
        "check-config", help="validate a configuration file and print the effective configuration (TOML)"
    )
    check.add_argument("config", help="the TOML configuration file")
    probe = commands.add_parser(
        "probe", help="exit 0 when the running proxy answers /healthz (or /readyz): a container health check"
    )
    probe.add_argument("--config", required=True, help="the proxy's TOML configuration file (for [metrics])")
    probe.add_argument("--ready", action="store_true", help="ask /readyz: listeners up and a broker answered")
    probe.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    explain = commands.add_parser(
        "explain", help="which quota applies to a client, from which entry and level, and which entries lost"
    )
    explain.add_argument("--user", default="ANONYMOUS", help="the user (default ANONYMOUS: no SASL)")
    explain.add_argument("--client-id", default="", help="the client.id (default empty)")
    explain.add_argument("--ip", help="the client's address")
    where = explain.add_mutually_exclusive_group(required=True)
    where.add_argument("--admin", help="a running proxy's HTTP address (http://host:9190): answers with bucket state")
    where.add_argument("--config", help="resolve from this configuration file and its state file instead")
    explain.add_argument("--json", action="store_true", help="print the answer as JSON")
    explain.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for --admin (default 10)")
    top = commands.add_parser(
        "top", help="a live view of running proxies: entities by produce, fetch or request time (the top extra)"
    )
    top.add_argument(
        "--url",
        action="append",
        required=True,
        help="a proxy's metrics address (http://host:9190); give it once per proxy or worker, their rates are summed",
    )
    top.add_argument("--interval", type=_positive, default=1.0, help="seconds between two reads (default 1)")
    top.add_argument("--sort", choices=("produce", "fetch", "request"), default="produce", help="the first order")
    top.add_argument("--timeout", type=_positive, default=3.0, help="seconds to wait for a proxy (default 3)")
    top.add_argument("--screenshot", metavar="FILE", help="save the view as SVG once rates are known, and exit")
    top.add_argument("--width", type=int, default=160, help="--screenshot's columns (default 160)")
    top.add_argument("--height", type=int, default=30, help="--screenshot's lines (default 30)")
    commands.add_parser("config-reference", help="print the reference of every key (docs/configuration.md)")
    commands.add_parser("metrics-reference", help="print the reference of every metric (docs/metrics.md)")
    from quotagate.pipeline.cli import add_parser as add_pipeline_parser

    add_pipeline_parser(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        if args.command == "pipeline":
            from quotagate.pipeline.cli import run as run_pipeline

            return run_pipeline(args)
        if args.command == "check-config":
            return _check_config(args.config)
        if args.command == "probe":
            return _probe(args.config, args.ready, args.timeout)
        if args.command == "explain":
            return _explain(args)
        if args.command == "top":
            return _top(args)
        if args.command == "config-reference":
            from quotagate.config.reference import reference_markdown

            print(reference_markdown(), end="")
            return 0
        if args.command == "metrics-reference":
            from quotagate.proxy.metrics_reference import metrics_markdown

            print(metrics_markdown(), end="")
            return 0
        return _run_workers(args.config, args.log_level, args.worker)
    except ConfigError as exc:
        print(f"quotagate: bad configuration: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
