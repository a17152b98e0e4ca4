"""What the server's API skins (``sandbox.api``) and the SDK (``sandbox.client``) share: the wire.

- ``grpc_gen``: the gRPC stubs generated from ``proto/sandbox/v1/sandbox.proto`` (``scripts/gen_proto.sh``);
- :mod:`sandbox.wire.convert`: proto messages ↔ models, and request validation (``validate_action``, ``Renewal``);
- :mod:`sandbox.wire.status`: the one table of error statuses (exception, agent code, gRPC, HTTP) and its maps;
- :mod:`sandbox.wire.limits`: message sizes and the deadline rule (``call_deadline``).

The SDK imports nothing of the server (``sandbox.api``, ``sandbox.service``, ``sandbox.backends``,
``sandbox.store``): what both sides must agree on lives here. Kept import-free, so importing
:mod:`sandbox.wire.limits` (stdlib only) does not pull in grpc or protobuf.
"""
