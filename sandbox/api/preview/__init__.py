"""Preview URLs: HTTP and websockets to a port inside a sandbox, through its agent's tunnel.

- :mod:`.proxy`: the routes (``/ports/{port}/`` and the full-path ``/apps/{port}/``), tickets and the HTTP relay;
- :mod:`.rewrite`: what the proxy changes in the headers that pass (pure functions);
- :mod:`.websocket`: the websocket relay, handshake first with the app.
"""
