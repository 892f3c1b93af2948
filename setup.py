"""The compiled parts of quotagate: the session's fast lane (quotagate/proxy/session_core.pyx), the
connections' per-read callbacks (quotagate/proxy/connection_core.pyx), the token bucket they and the
pipeline's replay charge (quotagate/quotas/bucket.pyx), the memo of rewritten responses
(quotagate/protocol/rewrite_memo.pyx) and the usual produce response's walk (quotagate/protocol/produce_walk.pyx).

Everything else is in pyproject.toml; this file only declares the extensions, which Cython turns into
C at build time (`pip install .`, and `pip install -e .`, which builds it in place).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            # No fused multiply-add: the bucket's arithmetic must round as Python's does, step by step.
            Extension(name, [name.replace(".", "/") + ".pyx"], extra_compile_args=["-ffp-contract=off"])
            for name in (
                "quotagate.proxy.session_core",
                "quotagate.proxy.connection_core",
                "quotagate.quotas.bucket",
                "quotagate.protocol.rewrite_memo",
                "quotagate.protocol.produce_walk",
            )
        ],
        compiler_directives={"language_level": "3"},
    )
)
