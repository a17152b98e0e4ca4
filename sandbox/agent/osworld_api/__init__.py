"""OSWorld's in-VM HTTP API, served in the desktop sandbox (``python3 -m sandbox.agent.osworld_api``).

OSWorld's harness (the ``desktop-env`` package: ``PythonController``, ``SetupController`` and the evaluators'
getters) drives its VM through an HTTP server on port 5000. This package serves the same routes, request and answer
shapes, written from what that client sends and expects (no OSWorld code): the desktop image's entrypoint starts it
on 127.0.0.1:5000, which the control plane's preview route reaches (``sandbox.url(5000)``). The routes are listed in
:mod:`.app`; what differs from the VM is said in docs/sandboxes.md ("OSWorld conventions in the desktop image").
"""
