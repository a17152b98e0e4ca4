"""Entry point of the in-sandbox agent: ``python3 -m sandbox.agent --kind terminal``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from sandbox.agent.app import KINDS, AgentApp, AgentConfig
from sandbox.agent.server import AgentServer
from sandbox.protocol import AGENT_SOCKET_NAME, SOCKET_DIR_IN_SANDBOX


def parse_args(argv: list[str]) -> AgentConfig:
    parser = argparse.ArgumentParser(prog="sandbox-agent", description=__doc__)
    parser.add_argument("--kind", choices=KINDS, default=os.environ.get("SANDBOX_KIND", "terminal"))
    parser.add_argument("--socket", default=os.path.join(SOCKET_DIR_IN_SANDBOX, AGENT_SOCKET_NAME))
    parser.add_argument("--workspace", default="/workspace")
    parser.add_argument("--roots", default="/workspace,/tmp", help="comma-separated directories the file API may touch")
    parser.add_argument("--display", default=os.environ.get("DISPLAY", ":0"))
    parser.add_argument("--cdp-port", type=int, default=9222)
    ns = parser.parse_args(argv)
    roots = tuple(r for r in ns.roots.split(",") if r)
    return AgentConfig(
        kind=ns.kind,
        socket_path=ns.socket,
        roots=roots,
        workspace=ns.workspace,
        display=ns.display,
        cdp_port=ns.cdp_port,
    )


async def run(config: AgentConfig) -> None:
    logger = logging.getLogger("sandbox.agent")
    app = AgentApp(config, logger=logger)
    server = AgentServer(
        app.ops(), tunnel_ports=app.tunnel_ports(), max_request_bytes=config.max_request_bytes, logger=logger
    )
    serving = asyncio.create_task(server.serve(config.socket_path))
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
    asyncio.run(run(parse_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
