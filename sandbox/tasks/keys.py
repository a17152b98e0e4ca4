"""pyautogui's key names (``pyautogui.KEYBOARD_KEYS``) as the X keysym names the agent's keyboard takes."""

from __future__ import annotations

from sandbox.errors import InvalidArgument

_NAMED = {
    "\t": "Tab", "\n": "Return", "\r": "Return", " ": "space", "tab": "Tab", "enter": "Return", "return": "Return",
    "space": "space", "esc": "Escape", "escape": "Escape", "backspace": "BackSpace", "del": "Delete",
    "delete": "Delete", "insert": "Insert", "home": "Home", "end": "End", "pageup": "Prior", "pgup": "Prior",
    "pagedown": "Next", "pgdn": "Next", "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "shift": "Shift_L", "shiftleft": "Shift_L", "shiftright": "Shift_R", "ctrl": "Control_L",
    "ctrlleft": "Control_L", "ctrlright": "Control_R", "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R",
    "option": "Alt_L", "optionleft": "Alt_L", "optionright": "Alt_R", "win": "Super_L", "winleft": "Super_L",
    "winright": "Super_R", "command": "Super_L", "capslock": "Caps_Lock", "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock", "pause": "Pause", "print": "Print", "printscreen": "Print", "prntscrn": "Print",
    "prtsc": "Print", "prtscr": "Print", "apps": "Menu", "clear": "Clear", "help": "Help", "select": "Select",
    "execute": "Execute", "separator": "KP_Separator", "add": "KP_Add", "subtract": "KP_Subtract",
    "multiply": "KP_Multiply", "divide": "KP_Divide", "decimal": "KP_Decimal", "volumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume", "volumemute": "XF86AudioMute", "playpause": "XF86AudioPlay",
    "nexttrack": "XF86AudioNext", "prevtrack": "XF86AudioPrev", "stop": "XF86AudioStop", "sleep": "XF86Sleep",
    "browserback": "XF86Back", "browserforward": "XF86Forward", "browserrefresh": "XF86Refresh",
    "browserhome": "XF86HomePage", "browsersearch": "XF86Search", "browserstop": "XF86Stop",
    "browserfavorites": "XF86Favorites", "launchmail": "XF86Mail", "kanji": "Kanji", "kana": "Katakana",
    "convert": "Henkan", "nonconvert": "Muhenkan",
    "modechange": "Mode_switch", "yen": "yen",
}  # fmt: skip
_NAMED |= {f"f{n}": f"F{n}" for n in range(1, 25)}
_NAMED |= {f"num{n}": f"KP_{n}" for n in range(10)}

KEY_NAMES = frozenset(_NAMED) | frozenset(chr(c) for c in range(0x21, 0x7F))
"""Every pyautogui key name translated (single printable characters included)."""


def x_key(name: object, *, where: str = "") -> str:
    """The X keysym name for a pyautogui key name (names longer than one character in any case, as pyautogui)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{where}a key name must be a non-empty string, not {name!r}")
    key = name if len(name) == 1 else name.lower()
    if key in _NAMED:
        return _NAMED[key]
    if len(key) == 1 and key.isprintable():
        return key
    raise InvalidArgument(f"{where}unknown key {name!r} (pyautogui's key names: enter, tab, ctrl, f5, a, ...)")
