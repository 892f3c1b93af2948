import sys
from pathlib import Path

# scripts/kafka_rig.py (stdlib-only, also a CLI) is importable as `kafka_rig` in every test.
sys.path.append(str(Path(__file__).resolve().parents[1] / "scripts"))

pytest_plugins = [
    "tests.support.kafka_fixtures",
    "tests.support.proxy_fixtures",
    "tests.support.redis_fixtures",
    "tests.support.broker_double",
]
