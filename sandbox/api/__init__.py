"""The API skins over the one service layer. They translate, nothing more.

- :mod:`.grpc`: the gRPC skin (for training clusters), with health and reflection;
- :mod:`.rest`: the REST skin (JSON under ``/v1``), which the web view and previews join on one HTTP app;
- :mod:`.web`: the developer web view and its VNC proxy;
- :mod:`.preview`: preview URLs, HTTP and websockets to a port inside a sandbox;
- :mod:`.contract`: what the HTTP routes promise in OpenAPI beyond their bodies;
- :mod:`.ws_relay`: the tear-down shared by the websocket relays (VNC, previews).
"""
