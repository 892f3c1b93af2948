"""Start, check and stop a local Kafka from the jars: `python -m kafka_rig up | status | down | tool`
(`make kafka-up` / `make kafka-down`)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO

from kafka_rig.cluster import DEFAULT_SASL_USERS, RUN_DIR, SASL_PORT_OFFSET, Cluster
from kafka_rig.jvm import TOOL_ALIASES, VARIANT_ENV, KafkaRigError, Variant, default_variant, ensure_jars, tool_command
from kafka_rig.processes import HOST


def _print_nodes(cluster: Cluster, out: IO[str]) -> None:
    for node in cluster.nodes:
        state = f"pid {node.pid}" if node.alive else "stopped"
        sasl = f", SASL {HOST}:{node.sasl_port}" if node.sasl_port is not None else ""
        print(f"  node {node.node_id}: {HOST}:{node.port}{sasl} ({state}) {node.dir}", file=out)


def _print_bootstrap(cluster: Cluster, out: IO[str]) -> None:
    print(f"bootstrap: {cluster.bootstrap}", file=out)
    if cluster.has_sasl:
        users = ", ".join(f"{user}/{password}" for user, password in cluster.sasl_users.items())
        print(f"sasl bootstrap: {cluster.sasl_bootstrap} (SASL_PLAINTEXT, PLAIN; users {users})", file=out)


def _cmd_up(args: argparse.Namespace) -> int:
    name = args.name or ("dev" if args.brokers in (None, 1) else f"dev{args.brokers}")
    saved = Cluster.attach(name)
    if args.fresh and saved is not None:
        saved.stop()
        shutil.rmtree(saved.workdir, ignore_errors=True)
        saved = None
    # Unspecified --brokers/--base-port mean "as it was created", so a plain `up` always
    # brings back an existing cluster.
    brokers = args.brokers or (saved.size if saved else 1)
    base_port = args.base_port or (saved.nodes[0].port if saved else 9092)
    ctrl_port = args.controller_base_port or (saved.nodes[0].controller_port if saved and not args.base_port else None)
    # Neither --sasl nor --no-sasl: as saved. --sasl: the default users on base port + 400.
    sasl_users: Mapping[str, str] | None = None
    sasl_port: int | None = None
    if args.sasl is None and saved is not None and saved.has_sasl:
        sasl_users, sasl_port = saved.sasl_users, saved.sasl_base_port
    elif args.sasl:
        sasl_users, sasl_port = DEFAULT_SASL_USERS, base_port + SASL_PORT_OFFSET
    started = time.monotonic()
    cluster = Cluster.create(
        name,
        brokers,
        base_port,
        controller_base_port=ctrl_port,
        wait=args.wait,
        sasl_users=sasl_users,
        sasl_base_port=sasl_port,
        variant=Variant.parse(args.kafka) if args.kafka else (saved.variant if saved else None),
    )
    if len(cluster.alive_nodes()) == cluster.size and cluster.is_ready():
        print(f"cluster {name!r} already running and ready")
    else:
        cluster.start()
        print(f"cluster {name!r} (Kafka {cluster.variant}) ready in {time.monotonic() - started:.1f}s")
    _print_nodes(cluster, sys.stdout)
    _print_bootstrap(cluster, sys.stdout)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    cluster = Cluster.attach(args.name)
    if cluster is None:
        print(f"no cluster {args.name!r} in {RUN_DIR}")
        return 1
    status = cluster.probe()
    ready = len(cluster.alive_nodes()) == cluster.size and not any(status.values())
    sasl = f"; SASL bootstrap {cluster.sasl_bootstrap}" if cluster.has_sasl else ""
    state = "ready" if ready else "NOT ready"
    print(f"cluster {args.name!r} (Kafka {cluster.variant}): {state}; bootstrap {cluster.bootstrap}{sasl}")
    _print_nodes(cluster, sys.stdout)
    for node_id, why in status.items():
        if why:
            print(f"  node {node_id}: {why}")
    return 0 if ready else 1


def _cmd_fetch(args: argparse.Namespace) -> int:
    for text in args.kafka or [str(default_variant())]:
        variant = Variant.parse(text)
        ensure_jars(variant)
        print(f"Kafka {variant.version}: {variant.libs_dir}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    cluster = Cluster.attach(args.name)
    if cluster is None:
        print(f"no cluster {args.name!r} in {RUN_DIR}")
    else:
        running = cluster.alive_nodes()
        cluster.stop()
        print(f"cluster {args.name!r}: stopped {len(running)} node(s)")
    if args.wipe:
        shutil.rmtree(RUN_DIR / args.name, ignore_errors=True)
        print(f"wiped {RUN_DIR / args.name}")
    return 0


def _cmd_tool(args: argparse.Namespace) -> int:
    """Runs the tool as if typed in this shell: the terminal's stdin (a console producer reads the
    records typed or piped in), stdout and stderr, this folder, no timeout. Ctrl-C reaches the tool
    too (the same process group): it stops as it does on its own, and its exit code is returned."""
    with subprocess.Popen(tool_command(args.main_class, *args.args)) as tool:
        while True:
            try:
                code = tool.wait()
            except KeyboardInterrupt:
                continue
            return code if code >= 0 else 128 - code  # killed by signal N: the shell's 128 + N


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_rig", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster (no-op if it is already up)")
    up.add_argument("--brokers", type=int, help="default 1 (or as the saved cluster was created)")
    up.add_argument("--base-port", type=int, help="first client port; default 9092 (or as saved)")
    up.add_argument("--controller-base-port", type=int, help="default base port + 100")
    up.add_argument("--name", help='default "dev", or "devN" for N brokers')
    up.add_argument("--wait", type=float, default=90.0, help="readiness timeout, seconds")
    up.add_argument("--fresh", action="store_true", help="stop and wipe it first")
    up.add_argument(
        "--sasl",
        action=argparse.BooleanOptionalAction,
        help=f"add a SASL_PLAINTEXT (PLAIN) listener on base port + {SASL_PORT_OFFSET} with users "
        f"{', '.join(f'{u}/{p}' for u, p in DEFAULT_SASL_USERS.items())}; default: as saved (else off)",
    )
    up.add_argument(
        "--kafka",
        help=f'Kafka version, "-zk" for ZooKeeper mode (3.x), e.g. 4.4.0 or 3.9.1-zk; default: as saved, '
        f"else ${VARIANT_ENV}, else kafka/pom.xml's",
    )
    status = sub.add_parser("status", help="is the cluster running and ready?")
    status.add_argument("--name", default="dev")
    fetch = sub.add_parser("fetch", help="fetch Kafka versions' jars from Maven Central (once; cached)")
    fetch.add_argument(
        "kafka", nargs="*", help=f"versions, e.g. 4.4.0 3.9.1-zk; default: ${VARIANT_ENV}, else kafka/pom.xml's"
    )
    down = sub.add_parser("down", help="stop the processes of a cluster started by `up`")
    down.add_argument("--name", default="dev")
    down.add_argument("--wipe", action="store_true", help="also delete its data")
    tool = sub.add_parser("tool", help="run a Kafka tool class, e.g. `tool topics --list ...`")
    tool.add_argument("main_class", help=f"class name or alias: {', '.join(TOOL_ALIASES)}")
    tool.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    handlers = {"up": _cmd_up, "status": _cmd_status, "fetch": _cmd_fetch, "down": _cmd_down, "tool": _cmd_tool}
    try:
        return handlers[args.command](args)
    except KafkaRigError as exc:
        print(f"kafka_rig: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `python -m kafka_rig up | head -1`: not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
