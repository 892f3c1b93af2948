"""What an operator meets on the first day, against a real Kafka and a real proxy process: a reload
that names what it applied and what waits for a restart."""

from __future__ import annotations

import re
import urllib.request

from tests.integration.helpers import wait_until


def scrape(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def test_a_reload_logs_and_counts_the_keys_it_applied_and_those_that_wait_for_a_restart(proxy_factory, kafka) -> None:
    proxy = proxy_factory(kafka.bootstrap)
    assert "quotagate_config_restart_pending_keys 0.0" in scrape(proxy.metrics_port)
    text = proxy.config_path.read_text()
    edited = text.replace("metadata_refresh_seconds = 5", "metadata_refresh_seconds = 6")
    proxy.config_path.write_text('[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1048576\n' + edited)
    wait_until(lambda: "config reloaded" in proxy.log_text(), 10, "the edit reloaded")
    assert re.search(
        r"config reloaded from \S+: 1 changed keys applied \(quotas\); 1 wait for a restart "
        r"\(proxy.metadata_refresh_seconds\)",
        proxy.log_text(),
    ), proxy.log_text()[-2000:]
    assert "quotagate_config_restart_pending_keys 1.0" in scrape(proxy.metrics_port)
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/quotas", timeout=5) as answer:
        assert b"alice" in answer.read(), "the quota was not applied"
