"""docker-compose.yml as docker-compose v1 and compose-go load it (tools installed by `make compose-tools`), and
what its services mount and run. No Docker engine is used."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quotagate.config import Config, load_config
from quotagate.config.reference import toml_data, toml_value

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_VENV = ROOT / ".cache" / "compose-venv"
COMPOSE_CHECK = ROOT / ".cache" / "compose-check" / "composecheck"


def compose_tool(name: str) -> Path:
    path = COMPOSE_CHECK if name == "composecheck" else COMPOSE_VENV / "bin" / name
    if not path.exists():
        pytest.fail(
            f"{path.relative_to(ROOT)} is missing, so docker-compose.yml cannot be parsed. Run `make compose-tools` "
            "(docker-compose 1.29.2 from PyPI in a venv, and compose-go built with Go), then run the tests again.",
            pytrace=False,
        )
    return path


def run_compose_tool(name: str, *args: str, stdin: str | None = None) -> str:
    """The tool's output; a failure shows its error output."""
    result = subprocess.run(
        [compose_tool(name), *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{name} {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def load_yaml(text: str) -> Any:
    """YAML as data, read by the compose venv's PyYAML (the project's own venv has no YAML parser)."""
    to_json = "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"
    return json.loads(run_compose_tool("python", "-c", to_json, stdin=text))


def compose_config() -> dict[str, Any]:
    """`docker-compose config`: the file validated against the Compose schema, anchors merged, paths absolute."""
    return load_yaml(run_compose_tool("docker-compose", "--project-directory", str(ROOT), "config"))


def compose_v2(*profiles: str) -> dict[str, Any]:
    """The project as compose-go (docker compose v2's loader) loads it with `profiles` active."""
    return json.loads(run_compose_tool("composecheck", str(ROOT / "docker-compose.yml"), ",".join(profiles)))


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def active(compose: dict[str, Any], *profiles: str) -> set[str]:
    """Services `docker compose --profile P...` starts: those without profiles, and those in an active one."""
    return {
        name
        for name, service in services(compose).items()
        if not service.get("profiles") or set(service["profiles"]) & set(profiles)
    }


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(source on the host, target in the container) of the service's bind mounts."""
    mounts = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":") if isinstance(volume, str) else (volume["source"], volume["target"])
        if "/" in source:  # a named volume's source is its name
            mounts.append((Path(source), target))
    return mounts


def named_volumes(service: dict[str, Any]) -> dict[str, str]:
    """target in the container -> mode ("rw", "ro") of the service's named volumes."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        if "/" not in source:
            mounts[target] = mode[0] if mode else "rw"
    return mounts


def place_mounts(service: dict[str, Any], root: Path) -> Path:
    """Copies the service's mounted files under `root` at the paths the container sees; returns `root`."""
    for source, target in bind_mounts(service):
        placed = root / target.lstrip("/")
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_bytes(source.read_bytes())
    return root


def config_path_in_command(service: dict[str, Any]) -> str:
    command = service["command"]
    return command[command.index("--config") + 1]


def mounted_source(service: dict[str, Any], target: str) -> Path:
    sources = [source for source, mounted_at in bind_mounts(service) if mounted_at == target]
    assert sources, f"nothing is mounted at {target}"
    return sources[0]


def quotagate_config(compose: dict[str, Any]) -> Config:
    service = services(compose)["quotagate"]
    return load_config(mounted_source(service, config_path_in_command(service)))


def quotas_toml(compose: dict[str, Any]) -> str:
    """The [[quotas]] tables of the compose quotagate configuration, for a local proxy's configuration."""
    return "".join(
        "[[quotas]]\n" + "".join(f"{key} = {toml_value(value)}\n" for key, value in entry.items())
        for entry in toml_data(quotagate_config(compose).quotas)
    )


def kafka_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in services(compose).items() if service.get("image") == KAFKA_IMAGE}


KAFKA_IMAGE = "apache/kafka:4.2.0"
