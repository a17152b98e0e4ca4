"""gRPC stubs generated from ``proto/sandbox/v1/sandbox.proto`` by ``scripts/gen_proto.sh``.

Only this file is committed; the ``sandbox_pb2*`` modules are generated at build time.
"""

from pathlib import Path

if not (Path(__file__).with_name("sandbox_pb2.py")).is_file():  # pragma: no cover - a build step was skipped
    raise ImportError("the gRPC stubs are not generated: run scripts/gen_proto.sh")
