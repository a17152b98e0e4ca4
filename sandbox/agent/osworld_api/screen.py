"""The screen, through the X server (python-xlib and Pillow, both in the image): ``/screenshot`` (a PNG of the
whole screen with the mouse pointer drawn in, as OSWorld's server draws it), ``/screen_size``, ``/cursor_position``,
``/setup/change_wallpaper`` and ``/wallpaper``.

Each call opens its own connection to the display (a few milliseconds), so concurrent requests share nothing.
Pillow and python-xlib are imported on the first call that needs them: idle, the server holds neither (about 2 MB
of every desktop's memory; OSWorld's harness may never ask for the screen through this API).
The wallpaper is painted on the root window, scaled to cover the screen (GNOME's "zoom"); the file it came from is
recorded in ``~/.config/sandbox/wallpaper`` and is what ``/wallpaper`` sends back. Until a task sets one, it sends
a PNG of the image's own wallpaper (the gradient the desktop's look.py paints), or 404 on a plain desktop (none).
"""

from __future__ import annotations

import importlib.util
import io
import mimetypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sandbox.agent.osworld_api.web import HttpError, Request, Response, file_response, json_response, text_response

WALLPAPER_RECORD = "~/.config/sandbox/wallpaper"
LOOK = "/opt/sandbox/desktop/look.py"
"""The desktop's look (images/desktop/rootfs): its ``blend(t)`` is the wallpaper's colour ``t`` of the way down."""
PUT_ROWS_BYTES = 200_000
"""Bytes of pixels per PutImage request (the core protocol's request limit is 256 KiB)."""
Z_PIXMAP = 2  # Xlib.Z_PIXMAP

if TYPE_CHECKING:
    from PIL import Image


@contextmanager
def connection() -> Iterator[Any]:
    from Xlib import display

    try:
        d = display.Display(os.environ.get("DISPLAY", ":0"))
    except Exception as e:
        raise HttpError(500, {"status": "error", "message": f"no X display: {e}"}) from e
    try:
        yield d
    finally:
        d.close()


def capture(with_cursor: bool = True) -> Image.Image:
    """The whole screen as RGB, the pointer drawn in."""
    from PIL import Image

    with connection() as d:
        root = d.screen().root
        geometry = root.get_geometry()
        raw = root.get_image(0, 0, geometry.width, geometry.height, Z_PIXMAP, 0xFFFFFFFF)
        image = Image.frombytes("RGB", (geometry.width, geometry.height), raw.data, "raw", "BGRX")
        if with_cursor:
            _draw_cursor(d, image)
        return image


def _draw_cursor(d: Any, image: Image.Image) -> None:
    from PIL import Image

    try:
        if not d.has_extension("XFIXES"):
            return
        d.xfixes_query_version()
        cursor = d.xfixes_get_cursor_image(d.screen().root)
    except Exception:
        return
    if not cursor.width or not cursor.height:
        return
    argb = b"".join(int(p & 0xFFFFFFFF).to_bytes(4, "little") for p in cursor.cursor_image)
    sprite = Image.frombytes("RGBA", (cursor.width, cursor.height), argb, "raw", "BGRA")
    image.paste(sprite, (cursor.x - cursor.xhot, cursor.y - cursor.yhot), sprite)


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=3)
    return out.getvalue()


def screenshot(_: Request) -> Response:
    return Response(200, png(capture()), "image/png")


def screen_size(_: Request) -> Response:
    with connection() as d:
        screen = d.screen()
        return json_response({"width": screen.width_in_pixels, "height": screen.height_in_pixels})


def cursor_position(_: Request) -> Response:
    with connection() as d:
        pointer = d.screen().root.query_pointer()
        return json_response([pointer.root_x, pointer.root_y])


def change_wallpaper(request: Request) -> Response:
    raw = request.json().get("path")
    if not raw:
        return text_response("Path not supplied!", 400)
    path = os.path.expandvars(os.path.expanduser(str(raw)))
    if not os.path.isfile(path):
        return text_response(f"File not found: {path}", 404)
    from PIL import Image

    try:
        picture = Image.open(path).convert("RGB")
    except Exception as e:
        return text_response(f"Failed to change wallpaper. Error: {e}", 500)
    paint_root(picture)
    record = os.path.expanduser(WALLPAPER_RECORD)
    os.makedirs(os.path.dirname(record), exist_ok=True)
    with open(record, "w") as f:
        f.write(os.path.abspath(path))
    return text_response("Wallpaper changed successfully")


def paint_root(picture: Image.Image) -> None:
    """The picture, scaled to cover the screen and centred, as the root window's background."""
    with connection() as d:
        screen = d.screen()
        width, height = screen.width_in_pixels, screen.height_in_pixels
        scale = max(width / picture.width, height / picture.height)
        size = (max(width, round(picture.width * scale)), max(height, round(picture.height * scale)))
        left, top = (size[0] - width) // 2, (size[1] - height) // 2
        fitted = picture.resize(size).crop((left, top, left + width, top + height))
        data = fitted.tobytes("raw", "BGRX")
        pixmap = screen.root.create_pixmap(width, height, screen.root_depth)
        gc = pixmap.create_gc()
        rows = max(1, PUT_ROWS_BYTES // (width * 4))
        for y in range(0, height, rows):
            n = min(rows, height - y)
            pixmap.put_image(gc, 0, y, width, n, Z_PIXMAP, 24, 0, data[y * width * 4 : (y + n) * width * 4])
        # The server keeps the background's pixels once set: the pixmap can go with this connection.
        screen.root.change_attributes(background_pixmap=pixmap)
        screen.root.clear_area(0, 0, width, height, True)
        gc.free()
        pixmap.free()
        d.sync()


def wallpaper(_: Request) -> Response:
    try:
        with open(os.path.expanduser(WALLPAPER_RECORD)) as f:
            path = f.read().strip()
    except OSError:
        path = ""
    if path and os.path.isfile(path):
        return file_response(path, mimetypes.guess_type(path)[0] or "application/octet-stream")
    if os.environ.get("SANDBOX_DESKTOP_PLAIN") == "1" or not os.path.isfile(LOOK):
        raise HttpError(404, {"error": "no wallpaper: a plain desktop"})
    return Response(200, png(own_wallpaper()), "image/png")


def own_wallpaper() -> Image.Image:
    """The image's gradient wallpaper at the screen's size, drawn as look.py draws it."""
    from PIL import Image

    spec = importlib.util.spec_from_file_location("sandbox_desktop_look", LOOK)
    assert spec is not None and spec.loader is not None
    look = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(look)
    with connection() as d:
        width, height = d.screen().width_in_pixels, d.screen().height_in_pixels
    column = Image.new("RGB", (1, height))
    for y in range(height):
        pixel = look.blend(y / max(1, height - 1))
        column.putpixel((0, y), ((pixel >> 16) & 0xFF, (pixel >> 8) & 0xFF, pixel & 0xFF))
    return column.resize((width, height), Image.Resampling.NEAREST)
