"""What a desktop snapshot starts on boot: the programs whose windows were open when it was taken."""

from __future__ import annotations

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import BackendError

AUTOSTART_FILE = "/home/sandbox/.config/sandbox/autostart"
"""One shell command line per program; the image's entrypoint starts each after the window manager."""

# Runs inside the sandbox under its python3: the command lines of the processes owning top-level windows.
_CAPTURE = r"""
import os, shlex, subprocess, sys
def prop(*args):
    return subprocess.run(["xprop", *args], capture_output=True, text=True).stdout
listing = prop("-root", "_NET_CLIENT_LIST")
windows = [w.strip() for w in listing.split("#", 1)[1].split(",")] if "#" in listing else []
lines = []
for window in windows:
    pid = prop("-id", window, "_NET_WM_PID").partition("=")[2].strip()
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        continue
    line = " ".join(shlex.quote(a) for a in argv)
    if line and line not in lines:
        lines.append(line)
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    f.write("".join(l + "\n" for l in lines))
print(len(lines))
"""


async def capture_autostart(agent: AgentClient) -> int:
    """Record the running GUI programs so the snapshot starts them again; returns how many."""
    result = await agent.exec(["python3", "-c", _CAPTURE, AUTOSTART_FILE], timeout=30)
    if result.exit_code != 0:
        raise BackendError(f"could not record the running programs: {result.stderr.strip()[-500:]}")
    return int(result.stdout.strip() or 0)
