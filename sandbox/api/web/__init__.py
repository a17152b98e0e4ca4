"""The developer web view (``/view``): the list of a tenant's sandboxes and the live view of one.

- :mod:`.view`: the pages, the login and tickets, the static files (``static/``, package data) and noVNC;
- :mod:`.fleet`: the list's feeds (a page of the fleet, thumbnails, output tails) and a sandbox's ports;
- :mod:`.capacity`: the list's capacity panel;
- :mod:`.screens`: the live screen of a sandbox without VNC (android), and its input;
- :mod:`.vnc_proxy`: the websocket ↔ VNC pump, and the filter that keeps a view-only session view-only.
"""
