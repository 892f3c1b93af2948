"""The compiled part of quotagate: the session's fast lane (quotagate/proxy/session_core.pyx).

Everything else is in pyproject.toml; this file only declares the extension, which Cython turns into
C at build time (`pip install .`, and `pip install -e .`, which builds it in place).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("quotagate.proxy.session_core", ["quotagate/proxy/session_core.pyx"])],
        compiler_directives={"language_level": "3"},
    )
)
