"""``python3 -m sandbox.agent.osworld_api [--listen HOST:PORT]``: serve OSWorld's in-VM API until killed.

Programs it runs start in the home folder, as on OSWorld's VM (where its server runs from the user's home).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sandbox.agent.osworld_api.app import table
from sandbox.agent.osworld_api.web import ApiServer

DEFAULT_LISTEN = "127.0.0.1:5000"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="osworld-api", description=__doc__)
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    host, _, port = ns.listen.rpartition(":")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s osworld-api %(levelname)s %(message)s")
    logger = logging.getLogger("sandbox.osworld_api")
    os.chdir(os.path.expanduser("~"))
    server = ApiServer((host or "127.0.0.1", int(port)), table(), logger=logger)
    logger.info("serving OSWorld's API on %s:%s", host, port)
    server.serve_forever()


if __name__ == "__main__":
    main()
