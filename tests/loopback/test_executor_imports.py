"""What Spark's executors import: the replay runs the proxy's quota engine there with pandas and
pyarrow alone (docs/pipeline.md), so nothing it imports may need the proxy's other dependencies."""

from __future__ import annotations

import subprocess
import sys


def test_the_quota_engine_and_the_replay_import_without_cryptography() -> None:
    """Spark's executors run the replay with pandas and pyarrow alone (docs/pipeline.md): the tenants'
    member rules are Kafka's mapping rules, which must not bring the certificate parser with them."""
    code = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'cryptography':\n"
        "            raise ImportError(name + ' is not on an executor')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import quotagate.quotas, quotagate.pipeline.whatif, quotagate.pipeline.rollup\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
