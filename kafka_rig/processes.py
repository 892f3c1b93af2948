"""The loopback host the rig's nodes listen on, and the processes and ports it watches (Linux /proc):
a pid is the rig's only if its command line names the rig's directory."""

from __future__ import annotations

import io
import socket
import subprocess
import time
from pathlib import Path

HOST = "127.0.0.1"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _pid_alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (a dead child we never reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised comm, which may contain spaces) is the state.
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X", "")


def _owned_pid(pid: int, marker: str) -> bool:
    """A live pid whose command line mentions our dir, i.e. one the rig started.

    Guards against killing an unrelated process that reused a stale pid."""
    return _pid_alive(pid) and marker in _cmdline(pid)


def _wait_gone(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None:
            if proc.poll() is not None:
                return True
        elif not _pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, io.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])
