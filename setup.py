"""The compiled parts of quotagate: the session's fast lane (quotagate/proxy/session_core.pyx) and the
connections' per-read callbacks (quotagate/proxy/connection_core.pyx).

Everything else is in pyproject.toml; this file only declares the extensions, which Cython turns into
C at build time (`pip install .`, and `pip install -e .`, which builds it in place).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(f"quotagate.proxy.{name}", [f"quotagate/proxy/{name}.pyx"])
            for name in ("session_core", "connection_core")
        ],
        compiler_directives={"language_level": "3"},
    )
)
