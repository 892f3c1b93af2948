"""The compiled modules are stated once (quotagate.compiled.MODULES) and each is one source."""

from __future__ import annotations

import ast
from pathlib import Path

from quotagate import compiled

PACKAGE = Path(compiled.__file__).parent
ROOT = PACKAGE.parent


def test_the_compiled_modules_are_those_with_a_pxd_and_a_symlinked_source() -> None:
    with_pxd = {
        "quotagate." + ".".join(pxd.relative_to(PACKAGE).with_name(pxd.name.removesuffix("_c.pxd")).parts)
        for pxd in PACKAGE.rglob("*_c.pxd")
    }
    assert with_pxd == set(compiled.MODULES), "compiled.MODULES and the *_c.pxd files disagree"
    for name in compiled.MODULES:
        source = PACKAGE.joinpath(*name.split(".")[1:])
        twin = source.with_name(source.name + "_c.py")
        assert twin.is_symlink() and twin.resolve() == source.with_suffix(".py").resolve(), f"{twin} is no symlink"


def test_setup_py_builds_the_list_compiled_py_states() -> None:
    """setup.py reads MODULES from compiled.py by path (the package is not installed yet) and names
    no module itself."""
    setup = (ROOT / "setup.py").read_text()
    named = {node.value for node in ast.walk(ast.parse(setup)) if isinstance(node, ast.Constant)}
    assert not named & set(compiled.MODULES), "setup.py lists compiled modules of its own"
    namespace: dict = {"__file__": str(ROOT / "setup.py"), "__name__": "not_main"}
    code = setup.replace("setup(ext_modules=extensions())", "")
    exec(compile(code, "setup.py", "exec"), namespace)
    assert namespace["compiled_modules"]() == compiled.MODULES


def test_no_compiled_source_branches_on_which_build_runs_it() -> None:
    """Compiled and interpreted builds differ only by the .pxd files: no source asks `cython.compiled`."""
    for name in compiled.MODULES:
        source = PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(source.read_text())
        asked = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "compiled" and getattr(node.value, "id", "") == "cython"
        ]
        assert not asked, f"{source.name} asks cython.compiled on lines {asked}"
