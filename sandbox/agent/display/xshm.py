"""MIT-SHM capture, which python-xlib does not implement: the request layouts from the X11 shm protocol spec."""

from __future__ import annotations

import ctypes
from contextlib import suppress
from typing import Any

from Xlib import X
from Xlib import error as xerror
from Xlib.protocol import rq


class _ShmAttach(rq.Request):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(1),
        rq.RequestLength(),
        rq.Card32("shmseg"),
        rq.Card32("shmid"),
        rq.Bool("read_only"),
        rq.Pad(3),
    )


class _ShmDetach(rq.Request):
    _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(2), rq.RequestLength(), rq.Card32("shmseg"))


class _ShmGetImage(rq.ReplyRequest):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(4),
        rq.RequestLength(),
        rq.Drawable("drawable"),
        rq.Int16("x"),
        rq.Int16("y"),
        rq.Card16("width"),
        rq.Card16("height"),
        rq.Card32("plane_mask"),
        rq.Card8("format"),
        rq.Pad(3),
        rq.Card32("shmseg"),
        rq.Card32("offset"),
    )
    _reply = rq.Struct(
        rq.ReplyCode(),
        rq.Card8("depth"),
        rq.Card16("sequence_number"),
        rq.ReplyLength(),
        rq.Card32("visual"),
        rq.Card32("size"),
        rq.Pad(16),
    )


_IPC_PRIVATE = 0
_IPC_CREAT = 0o1000
_IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmat.restype = ctypes.c_void_p
_libc.shmdt.argtypes = [ctypes.c_void_p]
_libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]


class SharedMemory:
    """A SysV shared-memory segment the X server copies screen pixels into: one memcpy instead of
    streaming ~4 MB through the socket (python-xlib's reply reading costs ~10 ms for a 1280x800 frame)."""

    def __init__(self, opcode: int, segment: int, address: int, size: int) -> None:
        self._opcode = opcode
        self._segment = segment
        self._address = address
        self._size = size

    @classmethod
    def attach(cls, d: Any, size: int) -> SharedMemory | None:
        """None when the server can't share memory with us (no MIT-SHM, another IPC namespace, another user)."""
        extension = d.query_extension("MIT-SHM")
        if extension is None:
            return None
        opcode = extension.major_opcode
        shmid = _libc.shmget(_IPC_PRIVATE, size, _IPC_CREAT | 0o600)
        if shmid < 0:
            return None
        address = _libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            _libc.shmctl(shmid, _IPC_RMID, None)
            return None
        segment = d.display.allocate_resource_id()
        catcher = xerror.CatchError()
        _ShmAttach(display=d.display, onerror=catcher, opcode=opcode, shmseg=segment, shmid=shmid, read_only=False)
        d.sync()
        # Marked for removal now; the kernel frees it once both sides have detached (or died).
        _libc.shmctl(shmid, _IPC_RMID, None)
        if catcher.get_error() is not None:
            _libc.shmdt(address)
            return None
        return cls(opcode, segment, address, size)

    def get_image(self, d: Any, drawable: Any, x: int, y: int, width: int, height: int, *, offset: int = 0) -> Any:
        """The pixels of the rectangle, which the server wrote into the segment at ``offset``."""
        reply = _ShmGetImage(
            display=d.display,
            opcode=self._opcode,
            drawable=drawable,
            x=x,
            y=y,
            width=width,
            height=height,
            plane_mask=0xFFFFFFFF,
            format=X.ZPixmap,
            shmseg=self._segment,
            offset=offset,
        )
        return (ctypes.c_char * reply.size).from_address(self._address + offset)

    def buffer(self) -> Any:
        """The whole segment, writable."""
        return (ctypes.c_char * self._size).from_address(self._address)

    def detach(self, d: Any) -> None:
        with suppress(Exception):
            _ShmDetach(display=d.display, opcode=self._opcode, shmseg=self._segment)
            d.sync()
        _libc.shmdt(self._address)
