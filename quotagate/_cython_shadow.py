"""What the compiled modules' sources read of `cython` when they run interpreted without Cython.

Each compiled module (`compiled.py` lists them) is one Python source that also runs as it is: its
`import cython` falls back to this module when Cython (a build-time dependency only) is absent, and
`cython.compiled` then says False, as Cython's own shadow module would.
"""

compiled = False
