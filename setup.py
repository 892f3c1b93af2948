"""The compiled builds of quotagate's hot modules (quotagate/compiled.py lists them).

Each is one Python source, `X.py`, compiled as `X_c` from the symlink `X_c.py` with the C types of
`X_c.pxd` beside it (Cython's pure Python mode). Without a C compiler the install goes on without
them: the same sources then run interpreted. Everything else is in pyproject.toml.
"""

import os

from setuptools import Extension, setup

# Kept in step with quotagate.compiled.MODULES (not imported: the package is not installed yet).
COMPILED_MODULES = (
    "quotagate.protocol.produce_walk",
    "quotagate.protocol.frames",
    "quotagate.protocol.wire_walk",
    "quotagate.protocol.response_walk",
    "quotagate.protocol.rewrite_memo",
    "quotagate.quotas.token_bucket",
    "quotagate.quotas.charging",
    "quotagate.proxy.usage_collectors",
    "quotagate.proxy.session_core",
    "quotagate.proxy.connection_core",
)


def extensions() -> list[Extension]:
    if os.environ.get("QUOTAGATE_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    from Cython.Build import cythonize

    return cythonize(
        [Extension(name + "_c", [name.replace(".", "/") + "_c.py"]) for name in COMPILED_MODULES],
        compiler_directives={
            "language_level": "3",
            "annotation_typing": False,  # the C types are the .pxd's alone
            "boundscheck": False,
            "wraparound": False,
        },
    )


setup(ext_modules=extensions())
