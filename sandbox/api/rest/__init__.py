"""The REST skin over the service layer: JSON over HTTP under ``/v1``.

The routes translate and call the service, nothing else. Bodies are the models of
``sandbox.models`` (plus the few REST-only bodies of :mod:`.bodies`); every error leaves as
``{"error": {"code", "message"}}`` with the HTTP status :func:`sandbox.wire.status.http_status`
gives it. Bad input is a 4xx and never a 500: a 500 means a bug, and is logged with its traceback.

Authentication: ``Authorization: Bearer <token>``, resolved by the ``TokenRegistry``.
Binary payloads (file contents, ``/screenshot``) travel as raw bodies; a screenshot inside
a JSON ``Observation`` is URL-safe base64.

- :mod:`.app`: :func:`create_app`, which puts the pieces together;
- :mod:`.routes`: the ``/v1`` routes;
- :mod:`.bodies`: the request and response bodies of the REST skin only;
- :mod:`.context`: the app's state and the per-request dependencies (caller, service);
- :mod:`.errors`: the error answers and handlers (and the route class that backs them);
- :mod:`.limits`: the request body size limits and the middleware that enforces them.
"""

from sandbox.api.rest.app import create_app

__all__ = ["create_app"]
