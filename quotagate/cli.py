"""Command line: `quotagate run --config FILE`, `quotagate check-config FILE`, `quotagate pipeline JOB`."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys

from quotagate.config import ConfigError, load_config


async def _run(config_path: str) -> int:
    from quotagate.proxy.server import Proxy

    config = load_config(config_path)
    proxy = Proxy(config)
    try:
        await proxy.start_admin_http()
        await proxy.start()
    except OSError as exc:
        print(f"quotagate: cannot listen: {exc}", file=sys.stderr)
        return 1
    watcher = proxy.watch_config(config_path)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: loop.create_task(proxy.stop()))
    loop.add_signal_handler(signal.SIGHUP, watcher.reload)
    # Everything allocated so far (modules, kafka-python's schema classes, the config) lives as long
    # as the process: move it out of the collector's sight. A full collection then scans only what
    # serving allocates, instead of pausing every connection for ~20-30 ms (measured on 2 cores).
    gc.collect()
    gc.freeze()
    logging.getLogger("quotagate").info("quotagate ready")
    await proxy.wait_stopped()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quotagate", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the proxy")
    run.add_argument("--config", required=True, help="the TOML configuration file")
    check = commands.add_parser("check-config", help="validate a configuration file and exit")
    check.add_argument("config", help="the TOML configuration file")
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
            load_config(args.config)
            print(f"{args.config}: OK")
            return 0
        import uvloop

        return uvloop.run(_run(args.config))
    except ConfigError as exc:
        print(f"quotagate: bad configuration: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
