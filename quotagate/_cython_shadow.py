"""What the compiled modules' sources read of `cython` when they run interpreted without Cython.

Each compiled module (`compiled.py` lists them) is one Python source that also runs as it is: its
`import cython` falls back to this module when Cython (a build-time dependency only) is absent, and
what the sources use of it behaves as Cython's own shadow module makes it behave interpreted.
"""

from __future__ import annotations

from typing import Any

compiled = False


def cast(kind: type, value: Any) -> Any:
    """`value` as a `kind` (compiled: a C cast, no conversion): itself if it is one already, else
    kind(value), as Cython's shadow casts to a Python type (bytes of a memoryview's slice)."""
    return value if value is None or isinstance(value, kind) else kind(value)
