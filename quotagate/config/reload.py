"""Hot reload of the configuration file: on change (polled) and on SIGHUP.

A file that fails validation is rejected with a logged error naming the key, and the running
configuration stays. Quotas and quota windows apply live; [proxy] and [metrics] changes need a
restart, and the log says so.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from quotagate.config.settings import Config, ConfigError, load_config

log = logging.getLogger("quotagate.config")

DEFAULT_POLL_SECONDS = float(os.environ.get("QUOTAGATE_CONFIG_POLL_SECONDS", "0.5"))


class ConfigWatcher:
    def __init__(
        self,
        path: str | Path,
        apply: Callable[[Config], None],
        on_result: Callable[[bool], None] = lambda ok: None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self._on_result = on_result
        self._poll_seconds = poll_seconds
        self._last_text = self._read()

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
        self._apply(config)
        log.info("config reloaded from %s", self.path)
        self._on_result(True)
        return True

    async def watch(self) -> None:
        """Reloads whenever the file's content changes (a rename over it counts too)."""
        while True:
            await asyncio.sleep(self._poll_seconds)
            text = self._read()
            if text is not None and text != self._last_text:
                self.reload()
