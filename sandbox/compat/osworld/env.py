"""OSWorld's own ``DesktopEnv``, built with this platform as its provider, without patching ``desktop_env``.

``DesktopEnv.__init__`` chooses its provider by name through ``create_vm_manager_and_provider``, a function it
imports into ``desktop_env.desktop_env``, and accepts only its own names (``docker``, ``aws``, ``vmware``, ...).
There is no registry or entry point to add one. So :func:`make_env` passes ``provider_name="docker"`` — the name
whose semantics are this platform's: a fresh environment is clean (no revert before the first task), and
``get_ip_address`` returns ``ip:server:chromium:vnc:vlc`` — while a wrapper it puts once around that module's
``create_vm_manager_and_provider`` hands ``DesktopEnv`` the manager and provider being built *in this thread*
(a thread-local; any other construction, in any thread, reaches OSWorld's own factory unchanged). ``env.provider``
is then a :class:`~sandbox.compat.osworld.provider.PlatformProvider`; ``env.provider_name`` reads ``"docker"``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sandbox.client import Client
from sandbox.compat.osworld.provider import PlatformProvider, PlatformVMManager, Ports
from sandbox.errors import FailedPrecondition

PROVIDER_NAME = "docker"
"""The ``provider_name`` ``DesktopEnv`` is given (see the module's docstring)."""
HOOK_MARK = "_sandbox_compat_hook"

_pending = threading.local()
_install_lock = threading.Lock()


def install_hook() -> None:
    """Wrap ``desktop_env.desktop_env.create_vm_manager_and_provider`` once (idempotent, thread-safe)."""
    try:
        import desktop_env.desktop_env as module
    except ImportError as e:
        raise FailedPrecondition(
            f"desktop_env is not importable ({e}): pip install 'sandbox[osworld]' (or run scripts/venv_osworld.sh)"
        ) from e
    with _install_lock:
        original: Callable[..., Any] = module.create_vm_manager_and_provider
        if getattr(original, HOOK_MARK, False):
            return

        def create_vm_manager_and_provider(provider_name: str, region: str | None, use_proxy: bool = False) -> Any:
            pair = getattr(_pending, "pair", None)
            if pair is not None:
                return pair
            return original(provider_name, region, use_proxy=use_proxy)

        setattr(create_vm_manager_and_provider, HOOK_MARK, True)
        module.create_vm_manager_and_provider = create_vm_manager_and_provider


@contextmanager
def providing(manager: PlatformVMManager, provider: PlatformProvider) -> Iterator[None]:
    """While inside, a ``DesktopEnv`` built in this thread gets ``manager`` and ``provider``."""
    install_hook()
    _pending.pair = (manager, provider)
    try:
        yield
    finally:
        _pending.pair = None


def make_env(
    client: Client,
    *,
    kind: str = "desktop",
    spec: Mapping[str, Any] | None = None,
    ports: Ports | None = None,
    ready_timeout_s: float = 180.0,
    create_wait_s: float = 120.0,
    path_to_vm: str | None = None,
    delete_on_stop: bool = False,
    **desktop_env_kwargs: Any,
) -> Any:
    """A ``desktop_env.DesktopEnv`` whose machine is a sandbox of this platform.

    ``client``: the SDK's :class:`~sandbox.client.Client` (thread-safe: many environments may share it).
    ``create_wait_s``: how long the create may queue for capacity on a full host (0: fail at once).
    ``path_to_vm``: an existing sandbox's id to attach to (else a new ``kind`` sandbox is created with ``spec``).
    ``desktop_env_kwargs`` go to ``DesktopEnv`` as they are (``action_space``, ``screen_size``,
    ``require_a11y_tree``, ``cache_dir``, ``client_password``, ...); ``provider_name`` is not one of them."""
    if "provider_name" in desktop_env_kwargs:
        raise TypeError("make_env chooses provider_name itself; leave it out")
    provider = PlatformProvider(
        client,
        kind=kind,
        spec=dict(spec or {}),
        ports=ports or Ports(),
        ready_timeout_s=ready_timeout_s,
        create_wait_s=create_wait_s,
        delete_on_stop=delete_on_stop,
    )
    manager = PlatformVMManager(provider)
    install_hook()
    from desktop_env.desktop_env import DesktopEnv

    with providing(manager, provider):
        return DesktopEnv(provider_name=PROVIDER_NAME, path_to_vm=path_to_vm, **desktop_env_kwargs)
