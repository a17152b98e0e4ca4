"""The HTTP side of OSWorld's in-VM API: requests parsed as Flask would hand them over, answers as it would send them.

Standard library only (the image has no Flask): ``ThreadingHTTPServer`` (a thread per connection, as Flask's
threaded development server), HTTP/1.0 answers with ``Content-Length`` (one request per connection). A request body
is read whole; a form is ``application/x-www-form-urlencoded`` or ``multipart/form-data`` (the setup controller's
``MultipartEncoder``), parsed with :mod:`email` into fields and files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 2 * 1024**3
"""Bytes a request body may have (an upload's file)."""


class HttpError(Exception):
    """Raised by a route: answered with ``status`` and ``body`` (a JSON object, or text)."""

    def __init__(self, status: int, body: dict[str, Any] | str) -> None:
        super().__init__(str(body))
        self.status = status
        self.body = body


@dataclass
class Upload:
    filename: str
    data: bytes


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    _form: tuple[dict[str, str], dict[str, Upload]] | None = field(default=None, repr=False)

    def json(self) -> dict[str, Any]:
        """The JSON object of the body; a body that is none answers 400 (Flask's ``request.json`` would fail too)."""
        try:
            doc = json.loads(self.body or b"null")
        except ValueError as e:
            raise HttpError(400, {"status": "error", "message": f"the body is not JSON: {e}"}) from e
        if not isinstance(doc, dict):
            raise HttpError(400, {"status": "error", "message": "the body must be a JSON object"})
        return doc

    @property
    def form(self) -> dict[str, str]:
        return self._parse_form()[0]

    @property
    def files(self) -> dict[str, Upload]:
        return self._parse_form()[1]

    def _parse_form(self) -> tuple[dict[str, str], dict[str, Upload]]:
        if self._form is None:
            self._form = parse_form(self.headers.get("content-type", ""), self.body)
        return self._form


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, Upload]]:
    """The fields and files of a form body (urlencoded or multipart)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        pairs = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in pairs.items()}, {}
    if kind != "multipart/form-data":
        return {}, {}
    message = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\nMIME-Version: 1.0\r\n\r\n" + body
    )
    fields: dict[str, str] = {}
    files: dict[str, Upload] = {}
    if not message.is_multipart():
        return fields, files
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is not None:
            files[name] = Upload(filename, data)
        else:
            fields[name] = data.decode(part.get_content_charset() or "utf-8", "replace")
    return fields, files


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    file: str | None = None
    """Send this file's bytes instead of ``body`` (Flask's ``send_file``)."""


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(status, (json.dumps(doc) + "\n").encode(), "application/json")


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/html; charset=utf-8")


def file_response(path: str, content_type: str = "application/octet-stream") -> Response:
    return Response(200, b"", content_type, file=path)


Handler = Callable[[Request], Response]


@dataclass(frozen=True)
class Route:
    methods: frozenset[str]
    handler: Handler


def routes(table: Iterable[tuple[str, Iterable[str], Handler]]) -> dict[str, Route]:
    return {path: Route(frozenset(methods), handler) for path, methods, handler in table}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], table: dict[str, Route], *, logger: logging.Logger) -> None:
        self.table = table
        self.logger = logger
        super().__init__(address, _RequestHandler)


class _RequestHandler(BaseHTTPRequestHandler):
    server: ApiServer
    server_version = "sandbox-osworld-api"

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        self.server.logger.info("%s %s", self.address_string(), format % args)

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        route = self.server.table.get(url.path.rstrip("/") or "/")
        try:
            if route is None:
                raise HttpError(404, "<h1>Not Found</h1>")
            if self.command not in route.methods and not (self.command == "HEAD" and "GET" in route.methods):
                raise HttpError(405, "<h1>Method Not Allowed</h1>")
            request = Request(
                self.command,
                url.path,
                {k: v[0] for k, v in parse_qs(url.query).items()},
                {k.lower(): v for k, v in self.headers.items()},
                self._read_body(),
            )
            response = route.handler(request)
        except HttpError as e:
            response = json_response(e.body, e.status) if isinstance(e.body, dict) else text_response(e.body, e.status)
        except Exception as e:  # a route's bug: answered as Flask answers an unhandled exception, and logged
            self.server.logger.exception("%s %s failed", self.command, url.path)
            response = json_response({"status": "error", "message": str(e)}, 500)
        self._send(response)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise HttpError(413, {"status": "error", "message": f"the body is over {MAX_BODY} bytes"})
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += self.rfile.read(size)
            self.rfile.readline()
            if len(out) > MAX_BODY:
                raise HttpError(413, {"status": "error", "message": f"the body is over {MAX_BODY} bytes"})

    def _send(self, response: Response) -> None:
        try:
            if response.file is not None:
                size = os.path.getsize(response.file)
                with open(response.file, "rb") as f:
                    self._head(response.status, response.content_type, size)
                    if self.command != "HEAD":
                        shutil.copyfileobj(f, self.wfile, 1024 * 1024)
                return
            self._head(response.status, response.content_type, len(response.body))
            if self.command != "HEAD":
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _head(self, status: int, content_type: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
