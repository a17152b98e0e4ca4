"""Files, as OSWorld's server serves them: ``/file`` (form ``file_path`` -> the file's bytes, 404 when missing),
``/setup/upload`` (multipart ``file_path`` + ``file_data`` -> written there; the folder must exist, as on the VM),
``/list_directory`` (``{path}`` -> ``{directory_tree}``) and ``/desktop_path``.

Paths are expanded (``~``, ``$VAR``) as the VM's server expands them. The directory tree is
``{"type": "directory", "name": ..., "children": [...]}`` with files as ``{"type": "file", "name": ...}``, children
in name order; a linked folder is listed as a file (not followed), and an unreadable one as ``{"error": ...}``.
"""

from __future__ import annotations

import mimetypes
import os
from typing import Any

from sandbox.agent.osworld_api.web import HttpError, Request, Response, file_response, json_response, text_response


def expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def get_file(request: Request) -> Response:
    raw = request.form.get("file_path") or request.query.get("file_path")
    if not raw:
        raise HttpError(400, {"error": "file_path not supplied"})
    path = expand(raw)
    if not os.path.isfile(path):
        return text_response("File not found", 404)
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        return text_response(f"File not readable: {e.strerror}", 403)
    return file_response(path, mimetypes.guess_type(path)[0] or "application/octet-stream")


def upload(request: Request) -> Response:
    raw = request.form.get("file_path")
    upload = request.files.get("file_data")
    if not raw or upload is None:
        raise HttpError(400, {"error": "file_path and file_data are required"})
    path = expand(raw)
    try:
        with open(path, "wb") as f:
            f.write(upload.data)
    except OSError as e:
        raise HttpError(500, {"status": "error", "message": f"cannot write {path}: {e.strerror}"}) from e
    return text_response("File Uploaded")


def list_directory(request: Request) -> Response:
    raw = request.json().get("path")
    if not raw:
        raise HttpError(400, {"error": "Path not supplied!"})
    path = expand(str(raw))
    if not os.path.isdir(path):
        raise HttpError(404, {"error": f"Directory not found: {path}"})
    return json_response({"directory_tree": tree(path)})


def tree(directory: str) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "directory", "name": os.path.basename(directory.rstrip("/")), "children": []}
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        return {"error": str(e)}
    for name in names:
        full = os.path.join(directory, name)
        if os.path.isdir(full) and not os.path.islink(full):
            node["children"].append(tree(full))
        else:
            node["children"].append({"type": "file", "name": name})
    return node


def desktop_path(_: Request) -> Response:
    return json_response({"desktop_path": os.path.expanduser("~/Desktop")})
