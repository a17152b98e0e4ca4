"""The request body size limits, enforced before a body is buffered."""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.api.rest.context import TRANSPORT
from sandbox.api.rest.errors import error_response, grpc_name_of_http
from sandbox.observability.metrics import Metrics
from sandbox.protocol import MAX_BLOB_BYTES, MAX_HEADER_BYTES
from sandbox.wire.status import error_code_of_http

MAX_JSON_BODY_BYTES = MAX_HEADER_BYTES // 2
"""A JSON body becomes (most of) one agent frame header: stay well inside that frame's limit."""
MAX_UPLOAD_BYTES = MAX_BLOB_BYTES
"""A file upload travels to the agent as one frame blob."""

_TOO_LARGE = 413
_PREVIEW = re.compile(r"^/v1/sandboxes/[^/]+/ports/[0-9]+(/|$)")


class BodyLimit:
    """ASGI middleware: refuse request bodies over the limit with 413 before they are buffered: the
    declared Content-Length up front, a chunked body as it streams in."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope["path"])
        if _PREVIEW.match(path):  # a preview's body streams through to the app in the sandbox: its own business
            await self.app(scope, receive, send)
            return
        upload = scope["method"] == "PUT" and path.endswith("/files/content")
        limit = MAX_UPLOAD_BYTES if upload else MAX_JSON_BODY_BYTES
        what = "a file upload" if upload else "a JSON body"
        too_large = f"{what} may be at most {limit} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                # Before routing: no route name yet.
                self.metrics.api_error(TRANSPORT, "unmatched", grpc_name_of_http(_TOO_LARGE))
                await error_response(_TOO_LARGE, error_code_of_http(_TOO_LARGE), too_large)(scope, receive, send)
                return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(_TOO_LARGE, too_large)  # answered by the app's HTTP error handler
            return message

        await self.app(scope, counting_receive, send)
