"""Which build of quotagate's compiled modules runs: compiled, or the same source interpreted.

Each compiled module is one typed Python source, `X.py`, that runs as it is. At install, Cython
compiles it as `X_c` (`X_c.py` is a symlink to `X.py`; `X_c.pxd` beside it gives the C types, as
aiohttp does for its websocket reader): one source, no second copy of any decision. `load` picks the
compiled build when every module has one and QUOTAGATE_NO_EXTENSIONS is unset, and the interpreted
one otherwise (no C compiler at install, a zip shipped to Spark executors, or the variable set), for
all the modules together: the compiled ones reach each other's C functions directly.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from pathlib import Path
from types import ModuleType

# The compiled modules, in the order they import each other: each `X` here has its `X_c.pxd` (a test
# checks both ways). Stated here only: setup.py reads it from this file (standard library imports only).
MODULES = (
    "quotagate.protocol.produce_walk",
    "quotagate.protocol.frames",
    "quotagate.protocol.wire_walk",
    "quotagate.protocol.response_walk",
    "quotagate.protocol.rewrite_memo",
    "quotagate.quotas.token_bucket",
    "quotagate.quotas.charging",
    "quotagate.proxy.usage_collectors",
    "quotagate.proxy.flow_control",
    "quotagate.proxy.session_core",
    "quotagate.proxy.connection_core",
)
NO_EXTENSIONS = os.environ.get("QUOTAGATE_NO_EXTENSIONS", "") not in ("", "0")


def _is_extension(module: ModuleType) -> bool:
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)


def extensions_built() -> bool:
    """Whether every module has its compiled build: its extension file beside its source. Looked for,
    not found through the import system, which would import the subpackages first (quotas imports
    its token bucket through `load`). Inside a zip (Spark executors) nothing is a file: interpreted."""
    package = Path(__file__).parent
    for name in MODULES:
        source = package.joinpath(*name.split(".")[1:])
        built = (source.parent / f"{source.name}_c{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES)
        if not any(path.is_file() for path in built):
            return False
    return True


COMPILED = not NO_EXTENSIONS and extensions_built()


def load(name: str) -> ModuleType:
    """The build of compiled module `name` (one of MODULES) that runs in this process."""
    return importlib.import_module(name + "_c" if COMPILED else name)


def core_build() -> str:
    """What `quotagate --version` says of the exchange core."""
    return "compiled" if COMPILED else "pure Python"
