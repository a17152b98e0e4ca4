"""The benchmark suite: ``python -m bench`` (``make bench``).

Our side runs through the public SDK (``sandbox.client.AsyncClient`` over gRPC) against a real ``sandbox server``
process the bench starts; every baseline is the docker CLI doing the same thing the way a user would, measured in
the same run on the same machine. Each section starts its own control plane (its own state file and settings),
and everything the bench creates carries ``sandbox.managed-by=sandbox`` and ``sandbox.owner=bench-<run id>``:
clean-up removes exactly that, and nothing else, after each section and at exit (Ctrl-C included).
"""


class BenchError(Exception):
    """A benchmark could not be measured (a baseline failed, the platform did not settle, ...)."""
