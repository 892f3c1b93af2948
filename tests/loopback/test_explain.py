"""`GET /quotas/explain` of a running proxy and `quotagate explain` (a process) asking it, or resolving
from a configuration file: which quota applies to a client, why, and its bucket now."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.quotas import QuotaKey
from tests.support.broker_double import BrokerDouble, proxy_in_front_of
from tests.support.http import http_get
from tests.support.proxy_fixtures import free_port_block

QUOTAS = """
[[quotas]]
client_id_prefix = "fleet-"
producer_byte_rate = 1000

[[quotas]]
client_id = "<default>"
producer_byte_rate = 50000

[[quotas]]
user = "<default>"
consumer_byte_rate = 7000
"""


async def quotagate(*args: str) -> tuple[int, str, str]:
    """`python -m quotagate ARGS` as a process, without blocking the loop the proxy serves on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "quotagate", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_running_proxy_explains_a_prefix_quota_in_debt_over_http_and_through_the_cli() -> None:
    async with proxy_in_front_of(BrokerDouble(), top_toml="quota_window_num = 1\n" + QUOTAS) as (proxy, _broker, _):
        port = free_port_block(1)
        server = AdminHttpServer(proxy)
        await server.start("127.0.0.1", port)
        try:
            now = proxy.loop.time()
            # 60 s of debt at 1000/s: still in debt when the CLI, a process of its own, asks (2 s were not,
            # under load).
            proxy.engine.charge("alice", "fleet-1", QuotaKey.PRODUCER_BYTE_RATE, 61_000, now)

            status, body = await http_get(port, "/quotas/explain?user=alice&client_id=fleet-2&ip=127.0.0.1")
            assert status == 200, body
            answer = json.loads(body)
            produce = answer["quotas"]["producer_byte_rate"]
            assert produce["applies"]["matched"] == "client-id-prefix=fleet-"
            assert produce["applies"]["level"] == "7p"
            assert produce["applies"]["shared_by"] == "every client id that starts with 'fleet-', of every user"
            bucket = produce["applies"]["bucket"]
            assert bucket["state"] == "in debt" and 55_000 < bucket["throttle_ms"] <= 60_000, bucket  # fleet-1's debt
            assert [(lost["matched"], lost["why"]) for lost in produce["lost"]] == [
                ("user=<default>", "sets no producer_byte_rate: the precedence goes on"),
                ("client-id=<default>", "level 7p (client-id-prefix=fleet-) comes first in the precedence"),
            ]
            assert answer["quotas"]["consumer_byte_rate"]["applies"]["level"] == "6"
            assert (await http_get(port, "/quotas/explain?user=alice&bogus=1"))[0] == 400

            code, out, err = await quotagate(
                "explain", "--admin", f"http://127.0.0.1:{port}", "--user", "alice", "--client-id", "fleet-2"
            )
            assert code == 0, err
            print(out)
            assert (
                "producer_byte_rate: 1000 from client-id-prefix=fleet- (level 7p, client-id prefix; source file)" in out
            )
            assert "bucket now: in debt" in out
            code, out, err = await quotagate("explain", "--admin", f"http://127.0.0.1:{port}", "--user", "a", "--json")
            assert code == 0 and json.loads(out)["quotas"]["producer_byte_rate"]["applies"]["level"] == "8", err
        finally:
            await server.stop()


async def test_explain_resolves_from_a_configuration_file_and_its_state_file(tmp_path: Path) -> None:
    config = tmp_path / "quotagate.toml"
    config.write_text('[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n' + QUOTAS)
    (tmp_path / "quotagate.toml.quotas.json").write_text(
        json.dumps(
            {
                "version": 1,
                "quotas": [{"user": "<default>", "client_id": None, "values": {"producer_byte_rate": 60000}}],
            }
        )
    )
    code, out, err = await quotagate("explain", "--config", str(config), "--user", "bob", "--client-id", "app")
    assert code == 0, err
    assert "producer_byte_rate: 60000 from user=<default> (level 6, default user; source api)" in out, out
    assert "bucket now: unknown: not asked of a running proxy" in out
    code, _out, err = await quotagate("explain", "--user", "bob")
    assert code == 2 and "one of the arguments --admin --config is required" in err
