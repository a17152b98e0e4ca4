"""The display's keyboard logic without an X server: characters and key names to keysyms, and the keymap that
borrows spare keycodes for keysyms the keyboard lacks (driven here through a fake X connection)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.agent.display.keymap import BORROWED_PROPERTY, XA_CARDINAL, Keymap
from sandbox.agent.display.keysyms import (
    NO_SYMBOL,
    XK_RETURN,
    XK_SHIFT_L,
    XK_TAB,
    char_keysym,
    keysym,
    split_combo,
    text_keysyms,
)
from sandbox.agent.errors import AgentError
from sandbox.protocol import ErrorCode

# Characters


@pytest.mark.parametrize(
    ("ch", "expected"),
    [
        ("a", 0x61),
        ("A", 0x41),
        ("~", 0x7E),
        (" ", 0x20),
        ("\xa0", 0xA0),  # no-break space: the first Latin-1 keysym after the C1 controls
        ("é", 0xE9),
        ("ö", 0xF6),
        ("ÿ", 0xFF),
        ("€", 0x010020AC),  # past Latin-1: Unicode keysyms are 0x01000000 | code point
        ("✓", 0x01002713),
        ("日", 0x010065E5),
        ("😀", 0x0101F600),
        ("\n", XK_RETURN),
        ("\t", XK_TAB),
    ],
)
def test_char_keysym(ch: str, expected: int) -> None:
    assert char_keysym(ch) == expected
    assert keysym(ch) == expected, "a one-character key name is that character"


@pytest.mark.parametrize("ch", ["\x00", "\x07", "\x1b", "\x7f", "\x85", "\x9f"])
def test_control_characters_cannot_be_typed(ch: str) -> None:
    with pytest.raises(AgentError) as caught:
        text_keysyms(f"ab{ch}")
    assert caught.value.code == ErrorCode.BAD_REQUEST
    assert f"control character {ch!r} at position 2" in caught.value.message


def test_text_line_ends_are_typed_as_return() -> None:
    assert text_keysyms("a\r\nb\rc\nd") == [0x61, XK_RETURN, 0x62, XK_RETURN, 0x63, XK_RETURN, 0x64]
    assert text_keysyms("wörld ✓") == [0x77, 0xF6, 0x72, 0x6C, 0x64, 0x20, 0x01002713]
    assert text_keysyms("") == []


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        ("ctrl+shift+t", ["ctrl", "shift", "t"]),
        ("ctrl++", ["ctrl", "+"]),
        ("+", ["+"]),
        ("ctrl + a", ["ctrl", "a"]),
        ("space", ["space"]),
        ("alt+ ", ["alt", " "]),
    ],
)
def test_split_combo(key: str, parts: list[str]) -> None:
    assert split_combo(key) == parts


def test_empty_combo_is_refused() -> None:
    with pytest.raises(AgentError, match="must not be empty"):
        split_combo("")


# Key names: these need python-xlib's keysym tables (the images have Debian's python3-xlib).


def test_key_names() -> None:
    pytest.importorskip("Xlib")
    assert [keysym(n) for n in ("Return", "enter", "ENTER", "esc", "BackSpace", "F5", "f5")] == [
        0xFF0D,
        0xFF0D,
        0xFF0D,
        0xFF1B,
        0xFF08,
        0xFFC2,
        0xFFC2,
    ]
    assert keysym("ctrl") == 0xFFE3 and keysym("shift") == XK_SHIFT_L
    assert (keysym("Aacute"), keysym("aacute"), keysym("AACUTE")) == (0xC1, 0xE1, 0xE1)
    assert keysym("XF86AudioMute") == keysym("xf86audiomute") == 0x1008FF12
    with pytest.raises(AgentError, match="unknown key 'nope'"):
        keysym("nope")


def test_constants_match_python_xlib() -> None:
    pytest.importorskip("Xlib")
    from Xlib import XK, X, Xatom

    assert (X.NoSymbol, XK.XK_Return, XK.XK_Tab, XK.XK_Shift_L) == (NO_SYMBOL, XK_RETURN, XK_TAB, XK_SHIFT_L)
    assert XA_CARDINAL == Xatom.CARDINAL


# The keymap, against a fake X connection holding a small keyboard map


A, SHIFTED_A, ONE, EXCLAM, SHIFT = 0x61, 0x41, 0x31, 0x21, XK_SHIFT_L
E_ACUTE, CHECK, EURO, JA, KANJI = 0xE9, 0x01002713, 0x010020AC, 0x01003042, 0x010065E5
WIDTH = 4
ATOM = 301


class FakeX:
    """The slice of python-xlib's Display (and root window) Keymap uses; keycodes 8..15, four keysyms a row."""

    def __init__(self, rows: dict[int, tuple[int, ...]], borrowed_property: Sequence[int] | None = None) -> None:
        self.rows = {code: rows.get(code, (NO_SYMBOL,) * WIDTH) for code in range(8, 16)}
        self.property = None if borrowed_property is None else list(borrowed_property)
        self.display = SimpleNamespace(info=SimpleNamespace(min_keycode=8, max_keycode=15))
        self.remaps: list[int] = []
        self.synced = 0

    # Display
    def intern_atom(self, name: str) -> int:
        assert name == BORROWED_PROPERTY
        return ATOM

    def get_keyboard_mapping(self, first: int, count: int) -> list[tuple[int, ...]]:
        return [self.rows[code] for code in range(first, first + count)]

    def change_keyboard_mapping(self, first: int, rows: list[tuple[int, ...]]) -> None:
        assert len(rows) == 1 and len(rows[0]) == WIDTH
        self.rows[first] = tuple(rows[0])
        self.remaps.append(first)

    def sync(self) -> None:
        self.synced += 1

    # Root window
    def get_full_property(self, atom: int, kind: int) -> Any:
        assert (atom, kind) == (ATOM, XA_CARDINAL)
        return None if self.property is None else SimpleNamespace(value=list(self.property))

    def change_property(self, atom: int, kind: int, fmt: int, data: list[int]) -> None:
        assert (atom, kind, fmt) == (ATOM, XA_CARDINAL, 32)
        self.property = list(data)

    def mapped(self, keysym: int) -> int:
        """The keycode whose unshifted symbol is ``keysym`` in the server's map."""
        (code,) = [code for code, row in self.rows.items() if row[0] == keysym]
        return code


KEYBOARD = {
    9: (A, SHIFTED_A, NO_SYMBOL, NO_SYMBOL),
    10: (SHIFT, NO_SYMBOL, NO_SYMBOL, NO_SYMBOL),
    12: (ONE, EXCLAM, NO_SYMBOL, NO_SYMBOL),
    14: (XK_RETURN, NO_SYMBOL, NO_SYMBOL, NO_SYMBOL),
}  # spare: 8, 11, 13, 15


class Barrier:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def make(fake: FakeX) -> Keymap:
    return Keymap(fake, fake)


def test_mapped_keysyms_and_shift() -> None:
    keymap = make(FakeX(KEYBOARD))
    assert keymap.use(A) == (9, False)
    assert keymap.use(SHIFTED_A) == (9, True)
    assert keymap.use(EXCLAM) == (12, True)
    assert keymap.shift == 10
    assert keymap.capacity == 4


def test_borrow_maps_missing_keysyms_onto_the_highest_spare_keycodes() -> None:
    fake, barrier = FakeX(KEYBOARD), Barrier()
    keymap = make(fake)
    keymap.borrow([A, E_ACUTE, CHECK, E_ACUTE], fake, barrier)
    assert fake.rows[15] == (E_ACUTE, E_ACUTE, NO_SYMBOL, NO_SYMBOL)
    assert fake.rows[13] == (CHECK, CHECK, NO_SYMBOL, NO_SYMBOL)
    assert fake.remaps == [15, 13], "a keysym the keyboard has, or one listed twice, must not be remapped"
    assert fake.property == [13, 15], "borrowed keycodes are published on the root window"
    assert barrier.calls == 1, "keys may be sent only once the clients have seen the new map"
    assert keymap.use(E_ACUTE) == (15, False) and keymap.use(CHECK) == (13, False)

    keymap.borrow([E_ACUTE, CHECK], fake, barrier)
    assert fake.remaps == [15, 13] and barrier.calls == 1, "keysyms already borrowed stay mapped"


def test_borrow_evicts_the_least_recently_used_after_a_barrier() -> None:
    fake, barrier = FakeX(KEYBOARD), Barrier()
    keymap = make(fake)
    keymap.borrow([E_ACUTE, CHECK, EURO, JA], fake, barrier)  # fills 15, 13, 11, 8
    assert barrier.calls == 1
    keymap.use(E_ACUTE)  # now CHECK is the least recently used
    keymap.borrow([KANJI, E_ACUTE], fake, barrier)
    assert fake.mapped(KANJI) == 13, "the least recently used borrowed keycode is reused"
    assert fake.mapped(E_ACUTE) == 15
    assert keymap.use(KANJI) == (13, False)
    assert barrier.calls == 3, "one barrier before evicting (keys sent on it must be handled), one after"
    assert fake.property == [8, 11, 13, 15]

    with pytest.raises(AgentError) as caught:
        keymap.borrow([CHECK, KANJI, EURO, JA, 0x01000100], fake, barrier)
    assert caught.value.code == ErrorCode.UNAVAILABLE and "only 4 spare keycodes" in caught.value.message


def test_batches_never_need_more_spares_than_there_are() -> None:
    keymap = make(FakeX(KEYBOARD))
    missing = [0x01000100 + i for i in range(9)]
    text = [A, missing[0], missing[1], A, missing[0], missing[2], missing[3], missing[4], ONE, *missing[5:], A]
    batches = list(keymap.batches(text))
    assert [k for batch in batches for k in batch] == text, "batches must keep every key, in order"
    assert all(len({k for k in batch if k in missing}) <= keymap.capacity for batch in batches)
    assert len(batches) == 3
    assert list(keymap.batches([A, ONE])) == [[A, ONE]]


def test_give_back_unmaps_every_borrowed_keycode() -> None:
    fake, barrier = FakeX(KEYBOARD), Barrier()
    keymap = make(fake)
    keymap.borrow([E_ACUTE, CHECK], fake, barrier)
    keymap.give_back(fake)
    assert fake.rows[15] == fake.rows[13] == (NO_SYMBOL,) * WIDTH
    assert fake.property == [] and fake.synced == 1
    keymap.borrow([EURO], fake, barrier)
    assert fake.mapped(EURO) in (13, 15), "given-back keycodes are spare again"


def test_a_restarted_agent_takes_over_the_published_keycodes() -> None:
    fake, barrier = FakeX(KEYBOARD), Barrier()
    make(fake).borrow([E_ACUTE, CHECK], fake, barrier)  # the previous agent, gone without giving back
    fake.remaps.clear()
    # Listed but not ours (a real key, or an empty row) must not be taken over.
    fake.property = [*fake.property, 9, 11]
    keymap = make(fake)
    assert keymap.use(E_ACUTE) == (15, False) and keymap.use(CHECK) == (13, False)
    assert keymap.use(A) == (9, False), "a listed keycode that is a real key stays that key"
    assert keymap.capacity == 4
    keymap.borrow([E_ACUTE, CHECK], fake, barrier)
    assert fake.remaps == [], "keysyms taken over need no remap"
    keymap.give_back(fake)
    assert fake.rows[15] == fake.rows[13] == (NO_SYMBOL,) * WIDTH
