"""The HTTP endpoints' answers (admin_http.py's `route`), against what they declare they read of the
proxy (`AdminContext`): a small double of plain parts here, no Proxy, loop or socket.
tests/loopback/test_observability.py serves them over HTTP from a real proxy."""

from __future__ import annotations

import json

from quotagate.proxy.admin_http import AdminContext, AdminHttpServer
from quotagate.quotas import QuotaKey
from tests.support.admin_context import Client, Session, state

ALICE = '[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'


def test_readyz_answers_503_with_the_proxys_reasons_and_200_without() -> None:
    proxy = state(ALICE)
    server = AdminHttpServer(proxy)
    proxy.problems = ["no listener is up"]
    status, content_type, body = server.route("GET", "/readyz")
    assert (status, content_type) == (503, "application/json")
    assert json.loads(body) == {"ready": False, "problems": ["no listener is up"]}
    proxy.problems = []
    assert server.route("GET", "/readyz")[0] == 200
    assert server.route("POST", "/readyz")[0] == 405


def test_quotas_shows_each_tracked_entitys_quota_tokens_and_throttle() -> None:
    proxy: AdminContext = state(ALICE)
    now = proxy.loop.time()
    proxy.engine.charge("alice", "app", QuotaKey.PRODUCER_BYTE_RATE, 100_000, now)
    proxy.entity_metrics.entity("alice", "app", now)
    view = AdminHttpServer(proxy).quota_state()
    (configured,) = view["configured"]
    assert (configured["user"], configured["producer_byte_rate"], configured["source"]) == (
        "alice",
        1000,
        {"producer_byte_rate": "file"},
    )
    (entity,) = view["entities"]
    quota = entity["quotas"]["producer_byte_rate"]
    assert (quota["matched"], quota["quota"]) == ("user=alice", 1000), quota
    assert quota["tokens"] < 0 and quota["throttle_ms"] > 0, quota
    assert view["delay_queue_size"] == 0


def test_quotas_counts_each_entitys_muted_connections() -> None:
    proxy = state(ALICE)
    now = proxy.loop.time()
    for user, client_id in (("alice", "app"), ("bob", "tool")):
        proxy.entity_metrics.entity(user, client_id, now)
    proxy.clients = [
        Client(Session("alice", "app"), muted=True),
        Client(Session("alice", "app"), muted=True),
        Client(Session("alice", "app"), muted=False),
        Client(Session("bob", "tool"), muted=False),
    ]
    muted = {(e["user"], e["client_id"]): e["muted_connections"] for e in proxy.quotas()["entities"]}
    assert muted == {("alice", "app"): 2, ("bob", "tool"): 0}
