"""The image builder: the sandbox images and the control plane's, built from Debian packages with no registry, and
pushed to one. ``sandbox images build|check|prune|push`` (:mod:`sandbox.cli.images`) runs :mod:`.builder`.

- :mod:`.builder`: build, check, prune and push, per kind, each stage cached by its hash;
- :mod:`.recipe`: what goes into a kind's images, and the hashes that name them (no engine needed);
- :mod:`.rootfs`: the base stage (``mmdebstrap``, ``docker import``); :mod:`.layer`: the top layer (the agent);
- :mod:`.wheels`: wheels of an image's pinned Python packages; :mod:`.controlplane`: the control plane's image;
- :mod:`.android`: the android image (an Android SDK from outside Debian); :mod:`.push`: tags and pushes;
- :mod:`.engine`: the Docker engine calls they share.
"""
