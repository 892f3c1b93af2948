"""What executors of a Spark cluster run: quotagate shipped to them as a zip (session.package_zip).
The whole pipeline on a real standalone cluster of two workers, against real storage: test_storage.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_executors_run_quotagate_from_its_zip_interpreted(tmp_path: Path) -> None:
    """Executors get quotagate as a zip of its .py files (session.package_zip), where no extension
    module can be imported from: what the what-if job imports there runs interpreted (compiled.load
    falls back by itself) and comes from the zip alone."""
    from quotagate.pipeline.session import package_zip

    archive = package_zip()
    code = (
        "import sys\n"
        "import quotagate.pipeline.whatif, quotagate.pipeline.rollup\n"
        "from quotagate import compiled\n"
        "print('COMPILED', compiled.COMPILED)\n"
        "print('\\n'.join(f'{n} {m.__file__}' for n, m in sys.modules.items() if n.startswith('quotagate')))"
    )
    # The zip first on the path, as Spark puts a --py-files archive on an executor's
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": archive},
    )
    lines = done.stdout.splitlines()
    assert "COMPILED False" in lines, done.stdout
    modules = [line for line in lines if line.startswith("quotagate")]
    assert "quotagate.quotas.token_bucket" in {line.split(" ")[0] for line in modules}, modules
    outside = [line for line in modules if not line.split(" ", 1)[1].startswith(archive)]
    assert modules and outside == [], f"imported from outside the zip: {outside}"
