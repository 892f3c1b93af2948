"""A reload names every changed key: those it applied and those that wait for a restart, as
RELOAD_RULES says; and the proxy applies exactly the keys the rules call applied."""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import pytest

from quotagate.config import Config, parse_config
from quotagate.config.reference import config_sections
from quotagate.config.reload import RELOAD_RULES, ConfigWatcher, changed_keys, reload_rule
from quotagate.proxy.server import Proxy

BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'
BEFORE = BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 100\n'
# A quota, a window, a [proxy] key, [usage], and [admin]'s live and restart-only keys changed at once.
AFTER = (
    "quota_window_num = 5\n"
    + BASE
    + "connect_timeout_seconds = 3\n"
    + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 500\n'
    + '[usage]\nenabled = true\ndirectory = "/var/lib/quotagate/usage"\n'
    + '[admin]\nalter_principals = ["admin"]\nstate_file = "/var/lib/quotagate/quotas.json"\n'
)


def test_every_key_of_the_file_has_a_reload_rule() -> None:
    for section in config_sections():
        for key in section.keys:
            reload_rule(section.attribute, key.name)  # raises KeyError naming a key without a rule
    assert {rule.section for rule in RELOAD_RULES} == {section.name for section in fields(Config)}


def test_a_reload_logs_the_changed_keys_applied_and_those_that_wait_for_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BEFORE)
    watcher = ConfigWatcher(path, lambda config: None)
    path.write_text(AFTER)
    with caplog.at_level(logging.INFO, logger="quotagate.config"):
        assert watcher.reload()
    report = watcher.last_report
    assert report.applied == ("quotas", "quota_window_num", "admin.alter_principals"), report
    assert report.restart == (
        "proxy.connect_timeout_seconds",
        "usage.enabled",
        "usage.directory",
        "admin.state_file",
    ), report
    assert (
        "3 changed keys applied (quotas, quota_window_num, admin.alter_principals); 4 wait for a restart "
        "(proxy.connect_timeout_seconds, usage.enabled, usage.directory, admin.state_file)"
    ) in caplog.text
    assert "4 changed keys take effect only at the next restart" in caplog.text


def test_keys_waiting_for_a_restart_are_named_until_the_file_is_back_as_it_started(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BEFORE)
    watcher = ConfigWatcher(path, lambda config: None)
    path.write_text(BEFORE + "[metrics]\nport = 9000\n")
    watcher.reload()
    assert watcher.last_report.restart == ("metrics.port",)
    path.write_text(BEFORE.replace("100", "200") + "[metrics]\nport = 9000\n")
    watcher.reload()
    assert watcher.last_report.applied == ("quotas",)
    assert watcher.last_report.restart == ("metrics.port",), "still not in force: still named"
    path.write_text(BEFORE)
    watcher.reload()
    assert watcher.last_report.applied == ("quotas",) and watcher.last_report.restart == ()
    assert watcher.last_report.describe() == "1 changed keys applied (quotas)"


def test_a_section_added_or_removed_counts_as_one_key() -> None:
    tls = "[upstream.tls]\ncheck_hostname = false\n[topic_thresholds]\ntotal_bytes_in_per_sec = 10\n"
    names = [name for _, _, name in changed_keys(parse_config(BASE), parse_config(BASE + tls))]
    assert names == ["upstream.tls", "topic_thresholds"]


async def test_the_proxy_applies_exactly_the_keys_the_rules_call_applied(tmp_path: Path) -> None:
    before, after = parse_config(BEFORE), parse_config(AFTER)
    proxy = Proxy(before)
    proxy.apply_config(after)
    for section, key, name in changed_keys(before, after):
        running = getattr(proxy.config, section)
        if key:
            running, wanted, old = (
                getattr(c, key) for c in (running, getattr(after, section), getattr(before, section))
            )
        else:
            wanted, old = getattr(after, section), getattr(before, section)
        expected = wanted if reload_rule(section, key).applied else old
        assert running == expected, f"{name}: running {running!r}, the rules say {expected!r}"
    assert proxy.engine.windows.quota_window_num == 5


def test_a_rule_for_an_unknown_section_is_an_error() -> None:
    with pytest.raises(KeyError, match=r"no reload rule for nowhere\.key"):
        reload_rule("nowhere", "key")


def test_every_section_a_rule_applies_has_one_applier_and_no_other() -> None:
    """A rule added to RELOAD_RULES cannot be left unapplied: the applier refuses to be made."""
    from quotagate.config.reload import RELOAD_RULES, ReloadApplier

    config = parse_config(BASE)
    applied = {rule.section for rule in RELOAD_RULES if rule.applied}
    calls: list[str] = []
    appliers = {(section,): (lambda running, s=section: calls.append(s)) for section in applied}
    ReloadApplier(config, appliers).apply(config)
    assert sorted(calls) == sorted(applied)
    with pytest.raises(ValueError, match="give each applied section one applier"):
        ReloadApplier(config, {key: value for key, value in appliers.items() if key != ("admin",)})
    with pytest.raises(ValueError, match="give each applied section one applier"):
        ReloadApplier(config, {**appliers, ("metrics",): lambda running: None})
