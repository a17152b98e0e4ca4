"""The X server's core keyboard map, and spare keycodes borrowed for the keysyms it lacks (xdotool's trick).

Standard library only: it works on whatever python-xlib ``Display`` and root window it is given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sandbox.agent.display.keysyms import NO_SYMBOL, XK_SHIFT_L
from sandbox.agent.errors import AgentError
from sandbox.protocol import ErrorCode

XA_CARDINAL = 6  # Xatom.h
BORROWED_PROPERTY = "_SANDBOX_AGENT_BORROWED_KEYCODES"


class Keymap:
    """The server's core keyboard map, plus spare keycodes to borrow for keysyms it lacks.

    Every keymap change makes each X client re-read the map; openbox spends ~40 ms of CPU on each, and a click
    waits for it meanwhile (its click-to-focus grab freezes the pointer until it catches up). So borrowed keycodes
    stay mapped, least recently used evicted first, and go back to NoSymbol only when the connection closes. A
    root window property lists them, so that an agent restarted on the same X server takes them over again.
    """

    def __init__(self, d: Any, root: Any) -> None:
        self._root = root
        self._property = d.intern_atom(BORROWED_PROPERTY)
        lo, hi = d.display.info.min_keycode, d.display.info.max_keycode
        rows = dict(enumerate(d.get_keyboard_mapping(lo, hi - lo + 1), lo))
        self._width = len(rows[lo])
        listed = root.get_full_property(self._property, XA_CARDINAL)
        self._borrowed: OrderedDict[int, int] = OrderedDict()  # keysym -> keycode, least recently used first
        for keycode in listed.value if listed is not None else ():
            row = rows.get(keycode)
            if row is not None and row[0] != NO_SYMBOL and row[0] == row[1]:
                del rows[keycode]
                self._borrowed[row[0]] = keycode
        self._codes: dict[int, tuple[int, bool]] = {}  # keysym -> (keycode, needs Shift)
        for index in (0, 1):
            for keycode, row in rows.items():
                if len(row) > index and row[index] != NO_SYMBOL:
                    self._codes.setdefault(row[index], (keycode, index == 1))
        # Taken from the end, so highest first: some clients treat low spare keycodes such as 8 as reserved.
        self._free = [keycode for keycode, row in rows.items() if not any(row)]
        self.capacity = len(self._free) + len(self._borrowed)
        self.shift = self._codes[XK_SHIFT_L][0]

    def use(self, keysym: int) -> tuple[int, bool]:
        """(keycode, needs Shift) for a keysym that is mapped; marks a borrowed one as just used."""
        if keysym in self._codes:
            return self._codes[keysym]
        self._borrowed.move_to_end(keysym)
        return self._borrowed[keysym], False

    def borrow(self, keysyms: Sequence[int], d: Any, barrier: Callable[[], None]) -> None:
        """Map the keysyms the keyboard lacks onto spare keycodes, evicting the least recently used ones."""
        wanted = {k for k in keysyms if k not in self._codes}
        missing = [k for k in dict.fromkeys(keysyms) if k in wanted and k not in self._borrowed]
        if not missing:
            return
        if len(wanted) > self.capacity:
            raise AgentError(ErrorCode.UNAVAILABLE, f"the keyboard has only {self.capacity} spare keycodes")
        if len(missing) > len(self._free):
            barrier()  # keys already sent on the keycodes about to be evicted must be handled first
        for keysym in missing:
            keycode = (
                self._free.pop()
                if self._free
                else self._borrowed.pop(next(k for k in self._borrowed if k not in wanted))
            )
            d.change_keyboard_mapping(keycode, [(keysym, keysym) + (NO_SYMBOL,) * (self._width - 2)])
            self._borrowed[keysym] = keycode
        self._publish()
        barrier()

    def give_back(self, d: Any) -> None:
        for keycode in self._borrowed.values():
            d.change_keyboard_mapping(keycode, [(NO_SYMBOL,) * self._width])
            self._free.append(keycode)
        self._borrowed.clear()
        self._publish()
        d.sync()

    def _publish(self) -> None:
        self._root.change_property(self._property, XA_CARDINAL, 32, sorted(self._borrowed.values()))

    def batches(self, keysyms: list[int]) -> Iterator[list[int]]:
        """Split a keysym sequence so that no part needs more borrowed keycodes than there are spares."""
        batch: list[int] = []
        borrowed: set[int] = set()
        for keysym in keysyms:
            if keysym not in self._codes and keysym not in borrowed:
                if len(borrowed) == self.capacity and batch:
                    yield batch
                    batch, borrowed = [], set()
                borrowed.add(keysym)
            batch.append(keysym)
        if batch:
            yield batch
