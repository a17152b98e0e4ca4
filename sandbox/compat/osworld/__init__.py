"""OSWorld's harness on this platform: its own ``DesktopEnv`` (``desktop-env`` 1.0.2), unchanged, with a desktop
sandbox as its machine.

    from sandbox.client import Client
    from sandbox.compat.osworld import make_env

    with Client("127.0.0.1:50051") as client:
        env = make_env(client, action_space="pyautogui", require_a11y_tree=False)
        obs = env.reset(task_config=task)            # OSWorld's setup controller, over its in-VM API
        obs, reward, done, info = env.step("pyautogui.hotkey('ctrl', 'alt', 't')")
        print(env.evaluate())                        # OSWorld's own getters and metrics
        env.close()                                  # deletes the sandbox

- :mod:`~sandbox.compat.osworld.env`: :func:`make_env` (how ``DesktopEnv`` is handed this provider)
- :mod:`~sandbox.compat.osworld.provider`: :class:`PlatformProvider`, :class:`PlatformVMManager`, :class:`Ports`
- :mod:`~sandbox.compat.osworld.cache`: :func:`seed_download_cache` (a task's downloads, offline)
- :mod:`~sandbox.compat.osworld.runner`: ``python -m sandbox.compat.osworld``: task files through the harness,
  scored by OSWorld and by the platform
- :mod:`~sandbox.compat.osworld.forward`: loopback ports relayed to sandbox ports through the preview route

Nothing here imports ``desktop_env`` until :func:`make_env` is called: the base install does not need it
(``pip install 'sandbox[osworld]'`` adds it). See docs/compat.md.
"""

from sandbox.compat.osworld.cache import cached_files, download_cache_name, seed_download_cache
from sandbox.compat.osworld.env import PROVIDER_NAME, install_hook, make_env, providing
from sandbox.compat.osworld.forward import Forwarder, Upstream, shared_forwarder
from sandbox.compat.osworld.provider import PlatformProvider, PlatformVMManager, Ports

__all__ = [
    "PROVIDER_NAME",
    "Forwarder",
    "PlatformProvider",
    "PlatformVMManager",
    "Ports",
    "Upstream",
    "cached_files",
    "download_cache_name",
    "install_hook",
    "make_env",
    "providing",
    "seed_download_cache",
    "shared_forwarder",
]
