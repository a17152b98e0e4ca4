"""Entry point of the in-sandbox agent: ``python3 -m sandbox.agent --kind terminal``.

It serves the unix socket ``--socket`` (and direct lanes on ``--lane-socket``, beside it by default) and, with
``--listen HOST:PORT`` (or $SANDBOX_AGENT_LISTEN), TCP too; TCP needs ``--token-file`` (or
$SANDBOX_AGENT_TOKEN_FILE): a TCP peer must present that file's secret first (or a direct lane's ticket).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from sandbox.agent.app import KINDS, AgentApp, AgentConfig
from sandbox.agent.auth import DEFAULT_HELLO_TIMEOUT, TokenFile, TokenFileError, parse_listen
from sandbox.agent.children import watch_children_by_pidfd
from sandbox.agent.lanes import Lanes
from sandbox.agent.server import AgentServer
from sandbox.protocol import AGENT_SOCKET_NAME, LANE_SOCKET_NAME, LISTEN_ENV, SOCKET_DIR_IN_SANDBOX, TOKEN_FILE_ENV


def parse_args(argv: list[str]) -> AgentConfig:
    parser = argparse.ArgumentParser(prog="sandbox-agent", description=__doc__)
    parser.add_argument("--kind", choices=KINDS, default=os.environ.get("SANDBOX_KIND", "terminal"))
    parser.add_argument(
        "--socket", default=os.path.join(SOCKET_DIR_IN_SANDBOX, AGENT_SOCKET_NAME), help='unix socket ("": none)'
    )
    parser.add_argument(
        "--lane-socket",
        default=None,
        metavar="PATH",
        help=f'the direct lanes\' unix socket (default: {LANE_SOCKET_NAME} beside --socket; "": none)',
    )
    parser.add_argument(
        "--listen",
        default=os.environ.get(LISTEN_ENV, ""),
        metavar="HOST:PORT",
        help=f"also serve TCP here, authenticated with --token-file (default ${LISTEN_ENV}; empty: no TCP)",
    )
    parser.add_argument(
        "--token-file",
        default=os.environ.get(TOKEN_FILE_ENV, ""),
        metavar="PATH",
        help=f"the secret a TCP peer must present in its hello, re-read on each (default ${TOKEN_FILE_ENV})",
    )
    parser.add_argument(
        "--hello-timeout",
        type=float,
        default=DEFAULT_HELLO_TIMEOUT,
        metavar="SECONDS",
        help="a TCP peer that sends no hello within this is hung up on",
    )
    parser.add_argument("--workspace", default="/workspace")
    parser.add_argument("--roots", default="/workspace,/tmp", help="comma-separated directories the file API may touch")
    parser.add_argument("--display", default=os.environ.get("DISPLAY", ":0"))
    parser.add_argument("--cdp-port", type=int, default=9222)
    ns = parser.parse_args(argv)
    roots = tuple(r for r in ns.roots.split(",") if r)
    listen: tuple[str, int] | None = None
    if ns.listen.strip():
        try:
            listen = parse_listen(ns.listen)
        except ValueError as e:
            parser.error(f"--listen (or ${LISTEN_ENV}): {e}")
        if not ns.token_file:
            parser.error(
                f"--listen needs --token-file (or ${TOKEN_FILE_ENV}): the agent never serves TCP unauthenticated"
            )
        try:
            TokenFile(ns.token_file).read()
        except TokenFileError as e:
            parser.error(f"--token-file (or ${TOKEN_FILE_ENV}): {e}; the agent never serves TCP unauthenticated")
    if not ns.socket and listen is None:
        parser.error("nothing to serve: give --socket, --listen, or both")
    lane_socket = ns.lane_socket
    if lane_socket is None:
        lane_socket = os.path.join(os.path.dirname(ns.socket), LANE_SOCKET_NAME) if ns.socket else ""
    if ns.hello_timeout <= 0:
        parser.error("--hello-timeout must be a positive number of seconds")
    return AgentConfig(
        kind=ns.kind,
        socket_path=ns.socket,
        lane_socket_path=lane_socket,
        roots=roots,
        workspace=ns.workspace,
        display=ns.display,
        cdp_port=ns.cdp_port,
        listen=listen,
        token_file=ns.token_file or None,
        hello_timeout=ns.hello_timeout,
    )


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when the image has it (Debian's python3-uvloop), else None: asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def run(config: AgentConfig) -> None:
    logger = logging.getLogger("sandbox.agent")
    loop = asyncio.get_running_loop()
    if isinstance(loop, asyncio.BaseEventLoop):  # uvloop watches its children itself
        watch_children_by_pidfd(loop)
    logger.info("agent event loop: %s.%s", type(loop).__module__, type(loop).__qualname__)
    app = AgentApp(config, logger=logger)
    ops = app.ops()
    server = AgentServer(
        ops,
        tunnel_ports=app.tunnel_ports(),
        reserved_ports=app.reserved_ports(),
        max_request_bytes=config.max_request_bytes,
        logger=logger,
        lanes=Lanes(ops),
    )
    serving = asyncio.create_task(
        server.serve(
            config.socket_path or None,
            listen=config.listen,
            tokens=TokenFile(config.token_file) if config.listen and config.token_file else None,
            hello_timeout=config.hello_timeout,
            lane_path=config.lane_socket_path or None,
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await asyncio.wait([serving, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    serving.cancel()
    await app.close()
    if serving.done() and not serving.cancelled() and serving.exception():
        raise serving.exception()  # type: ignore[misc]


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s", stream=sys.stderr)
    config = parse_args(sys.argv[1:] if argv is None else argv)
    # Read: the commands the agent runs need not see where the secret lives.
    for name in (LISTEN_ENV, TOKEN_FILE_ENV):
        os.environ.pop(name, None)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(run(config))


if __name__ == "__main__":
    main()
