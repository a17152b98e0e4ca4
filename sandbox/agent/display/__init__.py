"""The sandbox's X display, driven from the agent (desktop and browser kinds).

- ``service``: ``Display``, what the agent's ops call: screenshots, actions, health probes; X calls on one thread.
- ``session``: one live X connection: capture, cursor, window-manager probe, XTEST input, the ping barrier.
- ``actions``: the computer actions (move, click, drag, scroll, type_text, key, hotkey, ...) and their arguments.
- ``keymap``: the server's keyboard map and the spare keycodes borrowed for keysyms it lacks.
- ``keysyms``: characters and key names to X keysyms.
- ``encoders``: PNG (parallel deflate bands) and JPEG encoding of captured frames.
- ``frames``: the full-screen PNG's band cache: only the bands whose pixels changed are deflated again.
- ``xshm``: MIT-SHM capture through a shared-memory segment.
- ``damage``: the rows of the screen drawn on since the last capture (X DAMAGE), so a capture copies only those.
- ``arguments``: bounded integer and screen-coordinate arguments.

Nothing is imported here: ``keysyms``, ``keymap``, ``encoders``, ``frames`` and ``arguments`` need only the standard
library (and Pillow), so they load where python-xlib is not installed.
"""
