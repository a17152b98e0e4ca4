"""The route table of OSWorld's in-VM API (paths and methods as its server declares them)."""

from __future__ import annotations

import platform

from sandbox.agent.osworld_api import commands, files, screen, terminal, windows
from sandbox.agent.osworld_api.recording import Recorder
from sandbox.agent.osworld_api.web import Request, Response, Route, routes, text_response

GET, POST = ("GET",), ("POST",)
BOTH = ("GET", "POST")


def system(_: Request) -> Response:
    return text_response(platform.system())


def table() -> dict[str, Route]:
    recorder = Recorder()
    return routes(
        [
            ("/screenshot", GET, screen.screenshot),
            ("/screen_size", BOTH, screen.screen_size),
            ("/cursor_position", BOTH, screen.cursor_position),
            ("/wallpaper", BOTH, screen.wallpaper),
            ("/setup/change_wallpaper", POST, screen.change_wallpaper),
            ("/platform", BOTH, system),
            ("/execute", POST, commands.execute),
            ("/setup/execute", POST, commands.execute),
            ("/setup/execute_with_verification", POST, commands.execute_with_verification),
            ("/setup/launch", POST, commands.launch),
            ("/run_python", POST, commands.run_python),
            ("/run_bash_script", POST, commands.run_bash_script),
            ("/file", POST, files.get_file),
            ("/setup/upload", POST, files.upload),
            ("/list_directory", POST, files.list_directory),
            ("/desktop_path", BOTH, files.desktop_path),
            ("/setup/open_file", POST, windows.open_file),
            ("/setup/activate_window", POST, windows.activate_window),
            ("/setup/close_window", POST, windows.close_window),
            ("/window_size", POST, windows.window_size),
            ("/terminal", GET, terminal.terminal),
            ("/accessibility", GET, terminal.accessibility),
            ("/start_recording", POST, recorder.start),
            ("/end_recording", POST, recorder.end),
        ]
    )
