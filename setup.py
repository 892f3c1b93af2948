"""The compiled parts of quotagate: the session's fast lane (quotagate/proxy/session_core.pyx), the
connections' per-read callbacks (quotagate/proxy/connection_core.pyx), the memo of rewritten responses
(quotagate/protocol/rewrite_memo.pyx) and the usual produce response's walk (quotagate/protocol/produce_walk.pyx).

Everything else is in pyproject.toml; this file only declares the extensions, which Cython turns into
C at build time (`pip install .`, and `pip install -e .`, which builds it in place).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(name, [name.replace(".", "/") + ".pyx"])
            for name in (
                "quotagate.proxy.session_core",
                "quotagate.proxy.connection_core",
                "quotagate.protocol.rewrite_memo",
                "quotagate.protocol.produce_walk",
            )
        ],
        compiler_directives={"language_level": "3"},
    )
)
