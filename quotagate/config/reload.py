"""Hot reload of the configuration file: on change (polled) and on SIGHUP.

A file that fails validation is rejected with a logged error naming the key, and the running
configuration stays. A valid file is applied, and the log names every key that changed: those
applied now and those that wait for a restart, as RELOAD_RULES says (the table the "What a reload
applies" section of docs/configuration.md is generated from).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path

from quotagate.config.settings import Config, ConfigError, load_config

log = logging.getLogger("quotagate.config")

DEFAULT_POLL_SECONDS = float(os.environ.get("QUOTAGATE_CONFIG_POLL_SECONDS", "0.5"))


@dataclass(frozen=True)
class ReloadRule:
    """What a reload does with a section of the file, or with one key of it."""

    section: str  # a Config field
    key: str  # one key of the section, or "" for all of them (the most specific rule wins)
    applied: bool  # True: applied by a reload; False: at the next restart
    how: str


RELOAD_RULES: tuple[ReloadRule, ...] = (
    ReloadRule(
        "quotas", "", True, "At once, for every connection: a changed quota keeps the bucket's balance, so a debt is "
        "paid off at the new rate, never forgiven."
    ),
    ReloadRule(
        "tenants", "", True, "At once, as quotas: members move to their new tenant's bucket at their next request; a "
        "tenant's bucket keeps its balance while the tenant keeps its name and the key."
    ),
    ReloadRule("windows", "", True, "At once: the bursts are sized again; balances are kept."),
    ReloadRule("topic_thresholds", "", True, "At once."),
    ReloadRule("admin", "alter_principals", True, "At once, for the next AlterClientQuotas."),
    ReloadRule("admin", "describe_access", True, "At once, for the next DescribeClientQuotas."),
    ReloadRule("admin", "quota_api", True, "For connections opened from then on."),
    ReloadRule("admin", "state_file", False, "The state file is read once, at start."),
    ReloadRule("proxy", "", False, "The listeners, their limits and timeouts and the workers are set up at start."),
    ReloadRule(
        "proxy_tls", "", False, "At start; the certificate and key files it names are read again when they change "
        "and on SIGHUP, without a restart."
    ),
    ReloadRule("upstream_tls", "", False, "At start; its files are read again as [proxy.tls]'s are."),
    ReloadRule("metrics", "", False, "The HTTP server is bound at start."),
    ReloadRule("usage", "", False, "The usage sink is opened at start."),
    ReloadRule("cluster", "", False, "The connection to Redis and the share of each quota are set up at start."),
)  # fmt: skip


def reload_rule(section: str, key: str) -> ReloadRule:
    """The rule for `key` of `section` ("" for the section as a whole)."""
    for rule in RELOAD_RULES:
        if rule.section == section and rule.key == key:
            return rule
    for rule in RELOAD_RULES:
        if rule.section == section and rule.key == "":
            return rule
    raise KeyError(f"no reload rule for {section}.{key}: add one to RELOAD_RULES (quotagate/config/reload.py)")


def applied_config(running: Config, new: Config) -> Config:
    """`running` with what RELOAD_RULES says a reload applies taken from `new`: a section whose rule
    applies whole, or the keys of a section whose own rules apply; the rest keeps its running value
    until a restart."""
    changes = {}
    for section in fields(Config):
        name = section.name
        before, after = getattr(running, name), getattr(new, name)
        keyed = any(rule.section == name and rule.key for rule in RELOAD_RULES)
        if keyed and is_dataclass(before) and is_dataclass(after):
            keys = [key.name for key in fields(before) if reload_rule(name, key.name).applied]
            changes[name] = replace(before, **{key: getattr(after, key) for key in keys})  # type: ignore[type-var]
        elif reload_rule(name, "").applied:
            changes[name] = after
    return replace(running, **changes)


class ReloadApplier:
    """Applies reloaded configurations as RELOAD_RULES says, and nothing else: each group of sections
    whose rules apply has one applier (called once per reload with the configuration as it now runs,
    in the order of RELOAD_RULES), and refusing to be made when a section that a rule applies has no
    applier, or an applier a section no rule applies: a rule added later cannot be left unapplied."""

    def __init__(self, running: Config, appliers: dict[tuple[str, ...], Callable[[Config], None]]) -> None:
        applied = {rule.section for rule in RELOAD_RULES if rule.applied}
        given = {section for sections in appliers for section in sections}
        if given != applied:
            raise ValueError(
                f"reload appliers for {sorted(given)}, while RELOAD_RULES applies {sorted(applied)}: "
                "give each applied section one applier (quotagate/config/reload.py)"
            )
        order = [rule.section for rule in RELOAD_RULES]
        self._appliers = sorted(appliers.items(), key=lambda item: min(order.index(s) for s in item[0]))
        self.running = running

    def apply(self, new: Config) -> Config:
        """Applies `new` and returns the configuration that now runs."""
        self.running = applied_config(self.running, new)
        for _, applier in self._appliers:
            applier(self.running)
        return self.running


@dataclass(frozen=True)
class ReloadReport:
    """The keys a reload found changed (their TOML names), by what it did with them."""

    applied: tuple[str, ...]
    restart: tuple[str, ...]  # changed in the file since the start; the running values stay

    def describe(self) -> str:
        if not self.applied and not self.restart:
            return "no key changed"
        parts = [f"{len(self.applied)} changed keys applied ({', '.join(self.applied) or 'none'})"]
        if self.restart:
            parts.append(f"{len(self.restart)} wait for a restart ({', '.join(self.restart)})")
        return "; ".join(parts)


def changed_keys(old: Config, new: Config) -> list[tuple[str, str, str]]:
    """(section, key, TOML name) of every key whose value differs; a section given in one file and
    absent from the other ([proxy.tls], [topic_thresholds]) and [[quotas]] count as one key."""
    changed = []
    for section in fields(Config):
        before, after = getattr(old, section.name), getattr(new, section.name)
        if before == after:
            continue
        toml = section.metadata.get("toml")
        prefix = "" if toml == "top-level keys" else section.metadata.get("toml_name", section.name) + "."
        if is_dataclass(before) and is_dataclass(after) and toml != "array of tables":
            for key in fields(before):
                if getattr(before, key.name) != getattr(after, key.name):
                    changed.append((section.name, key.name, prefix + key.name))
        else:
            changed.append((section.name, "", section.metadata.get("toml_name", section.name)))
    return changed


def reload_report(started: Config, running: Config, new: Config) -> ReloadReport:
    """Keys applied: changed from the running configuration, where a reload applies them. Keys that
    wait for a restart: changed from the configuration the process started with."""
    applied = [name for section, key, name in changed_keys(running, new) if reload_rule(section, key).applied]
    restart = [name for section, key, name in changed_keys(started, new) if not reload_rule(section, key).applied]
    return ReloadReport(tuple(applied), tuple(restart))


class ConfigWatcher:
    def __init__(
        self,
        path: str | Path,
        apply: Callable[[Config], None],
        on_result: Callable[[bool], None] = lambda ok: None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        started: Config | None = None,
    ) -> None:
        """`started`: the configuration the process runs with (default: the file as it is now)."""
        self.path = Path(path)
        self._apply = apply
        self._on_result = on_result
        self._poll_seconds = poll_seconds
        self._last_text = self._read()
        self.started = started if started is not None else load_config(self.path)
        self.running = self.started
        self.last_report = ReloadReport((), ())

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def reload(self) -> bool:
        """Loads the file now and applies it if valid; returns whether it was applied."""
        self._last_text = self._read()
        try:
            config = load_config(self.path)
        except ConfigError as exc:
            log.error("config reload rejected, the running configuration stays: %s", exc)
            self._on_result(False)
            return False
        except Exception:  # a defect in validation must not end reloading (later good files apply)
            log.exception("config reload rejected, the running configuration stays: the file could not be read")
            self._on_result(False)
            return False
        report = reload_report(self.started, self.running, config)
        self._apply(config)
        self.running, self.last_report = config, report
        log.info("config reloaded from %s: %s", self.path, report.describe())
        if report.restart:
            log.warning(
                "config: %d changed keys take effect only at the next restart: %s",
                len(report.restart), ", ".join(report.restart),
            )  # fmt: skip
        self._on_result(True)
        return True

    async def watch(self) -> None:
        """Reloads whenever the file's content changes (a rename over it counts too)."""
        while True:
            await asyncio.sleep(self._poll_seconds)
            text = self._read()
            if text is not None and text != self._last_text:
                self.reload()
