"""The folders the proxy writes, checked before it opens a listener: the state file's ([admin]
state_file: the quotas set through the API when alter_principals lets anyone alter them, and the
buckets' levels of a process that shares no quota) and the usage records' ([usage] directory, for
the file sinks). A folder it cannot write is a ConfigError naming the key at
start, instead of a failed AlterClientQuotas or dropped usage records once clients are connected.

load_config has made both paths absolute (relative ones are taken from the config file's folder).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from quotagate.config.settings import Config, ConfigError


def written_folders(config: Config) -> list[tuple[str, Path]]:
    """(key, folder) of every folder this configuration makes the proxy write."""
    folders = []
    admin = config.admin
    api_writes = admin.quota_api == "proxy" and bool(admin.alter_principals)
    if admin.state_file and (api_writes or not config.shares_quotas):
        folders.append(("admin.state_file", Path(admin.state_file).parent))
    if config.usage.enabled and config.usage.sink in ("parquet", "jsonl"):
        folders.append(("usage.directory", Path(config.usage.directory)))
    return folders


def check_written_folders(config: Config) -> list[tuple[str, Path]]:
    """Creates each folder if missing and writes and removes a file in it, as the process that will
    write there; returns the folders, or raises ConfigError naming the key of the first it cannot write."""
    folders = written_folders(config)
    for key, folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            descriptor, probe = tempfile.mkstemp(prefix=".quotagate-write-check.", dir=folder)
            os.close(descriptor)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(
                key,
                f"{folder} is not writable by this process (uid {os.getuid()}): {exc.strerror}. Give a folder it "
                "can write (in the image, under the /var/lib/quotagate volume)",
            ) from exc
    return folders
