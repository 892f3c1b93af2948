"""The compiled builds of quotagate's hot modules (quotagate/compiled.py lists them; read here by path).

Each is one Python source, `X.py`, compiled as `X_c` from the symlink `X_c.py` with the C types of
`X_c.pxd` beside it (Cython's pure Python mode). Without a C compiler the install goes on without
them: the same sources then run interpreted. Everything else is in pyproject.toml.
"""

import importlib.util
import os
from pathlib import Path

from setuptools import Extension, setup


def compiled_modules() -> tuple[str, ...]:
    """quotagate.compiled.MODULES, from the file itself (standard library only): the package cannot be
    imported before it is installed."""
    path = Path(__file__).parent / "quotagate" / "compiled.py"
    spec = importlib.util.spec_from_file_location("quotagate_compiled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MODULES


def extensions() -> list[Extension]:
    if os.environ.get("QUOTAGATE_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    from Cython.Build import cythonize

    return cythonize(
        [Extension(name + "_c", [name.replace(".", "/") + "_c.py"]) for name in compiled_modules()],
        compiler_directives={
            "language_level": "3",
            "annotation_typing": False,  # the C types are the .pxd's alone
            "boundscheck": False,
            "wraparound": False,
        },
    )


setup(ext_modules=extensions())
