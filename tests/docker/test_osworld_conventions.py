"""The desktop image as OSWorld's tasks assume their VM (issue 33, item 0), in real network-none desktop sandboxes
run with the platform's confinement (no capabilities, no-new-privileges): the user ``user`` and its home with the
standard folders, the same files under /home/sandbox, sudo with the client password, ctrl+alt+t opening a window
titled "Terminal" in the home folder, gnome-terminal's options, google-chrome."""

from __future__ import annotations

import pytest

from sandbox.agent.osworld_api.terminal import screen_text
from sandbox.backends.agent_client import AgentClient
from tests.conftest import SandboxFactory
from tests.polling import eventually

pytestmark = pytest.mark.docker

FOLDERS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates", "Videos")


async def _out(agent: AgentClient, cmd: str) -> str:
    result = await agent.exec(cmd)
    assert result.exit_code == 0, f"{cmd}: {result.stderr}"
    return str(result.stdout)


async def _window(agent: AgentClient, title: str, within: float = 20) -> str:
    """The id of the visible window titled exactly ``title``, once there is one."""
    found: list[str] = []

    async def shown() -> bool:
        result = await agent.exec(f"xdotool search --onlyvisible --name '^{title}$'")
        found[:] = result.stdout.split()
        return result.exit_code == 0 and bool(found)

    await eventually(shown, within, f"a window titled {title!r}")
    return found[0]


async def _shell_cwd(agent: AgentClient, window: str) -> str:
    """The working directory of the shell in the terminal window ``window`` (the xterm's child)."""
    pid = (await _out(agent, f"xdotool getwindowpid {window}")).strip()
    found: list[str] = []

    async def started() -> bool:
        result = await agent.exec(f"readlink /proc/$(pgrep -P {pid} | head -n1)/cwd")
        found[:] = [result.stdout.strip()]
        return result.exit_code == 0 and bool(found[0])

    await eventually(started, 10, "the terminal's shell")
    return found[0]


async def test_the_user_its_home_and_the_platform_paths(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop", network="none")
    assert (await _out(sb.agent, "id -un; id -u; echo $HOME")).split() == ["user", "1000", "/home/user"]
    for folder in FOLDERS:
        owner = await _out(sb.agent, f"stat -c %U /home/user/{folder}")
        assert owner.strip() == "user", folder
    # A setup step writing under /home/sandbox (the platform's name) and one under ~ see the same files.
    await _out(sb.agent, "echo from-platform > /home/sandbox/Desktop/a.txt")
    assert await _out(sb.agent, "cat ~/Desktop/a.txt /home/user/Desktop/a.txt") == "from-platform\n" * 2
    dirs = await _out(sb.agent, "cat ~/.config/user-dirs.dirs")
    assert 'XDG_DESKTOP_DIR="$HOME/Desktop"' in dirs and 'XDG_PUBLICSHARE_DIR="$HOME/Public"' in dirs
    prefs = await _out(sb.agent, "cat ~/.config/google-chrome/Default/Preferences")  # Chromium's, by the link
    assert '"default_directory": "/home/user/Downloads"' in prefs


async def test_sudo_takes_the_client_password(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop", network="none")
    # As OSWorld's setup writes it: a password on stdin, a command that needs no root.
    made = await sb.agent.exec("echo password | sudo -S mkdir -p ~/Desktop/project/src && ls -d ~/Desktop/project/src")
    assert made.exit_code == 0 and made.stdout == "/home/user/Desktop/project/src\n", made.stderr
    assert "[sudo] password for user:" in made.stderr
    # The ticket of that shell does not carry over: a new one must give the password again.
    wrong = await sb.agent.exec("printf 'nope\\nnope\\nnope\\n' | sudo -S -k true")
    assert (
        wrong.exit_code == 1 and "Sorry, try again." in wrong.stderr and "3 incorrect password attempts" in wrong.stderr
    )
    no_password = await sb.agent.exec("sudo -k; sudo -n true")
    assert no_password.exit_code == 1 and "a password is required" in no_password.stderr
    no_tty = await sb.agent.exec("sudo -k; sudo true </dev/null")
    assert no_tty.exit_code == 1 and "a terminal is required" in no_tty.stderr
    # What needs root fails as the command itself fails (the container grants no root), with sudo's exit code.
    root_only = await sb.agent.exec("echo password | sudo -S touch /etc/osworld-test")
    assert root_only.exit_code == 1 and "Permission denied" in root_only.stderr
    assert (await _out(sb.agent, "echo password | sudo -S -u root whoami 2>/dev/null")).strip() == "user"


async def test_ctrl_alt_t_opens_a_terminal_titled_terminal_in_the_home(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop", network="none")
    await sb.agent.act({"type": "hotkey", "keys": ["ctrl", "alt", "t"]})
    window = await _window(sb.agent, "Terminal")
    assert await _shell_cwd(sb.agent, window) == "/home/user"
    wm_class = await _out(sb.agent, f"xprop -id {window} WM_CLASS")
    assert '"gnome-terminal-server"' in wm_class
    # The shell's prompt retitles an xterm; this one keeps its title, so activate_window "Terminal" finds it.
    await sb.agent.act({"type": "type_text", "text": "echo typed-in-terminal\n"})

    async def echoed() -> bool:  # the output's own line, not the command line's echo
        log = (await sb.agent.exec("cat /tmp/sandbox-terminal/*.log")).stdout
        return "typed-in-terminal" in screen_text(log).splitlines()

    await eventually(echoed, 20, "the typed command's output in the terminal")
    assert (await _out(sb.agent, f"xdotool getwindowname {window}")).strip() == "Terminal"
    assert (await sb.agent.exec("wmctrl -a Terminal")).exit_code == 0


async def test_gnome_terminal_options_and_google_chrome(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop", network="none")
    opened = await sb.agent.exec(
        "gnome-terminal --working-directory=/home/user/Documents --title=Docs", keep_background=True
    )
    assert opened.exit_code == 0, opened.stderr
    window = await _window(sb.agent, "Docs")
    assert await _shell_cwd(sb.agent, window) == "/home/user/Documents"
    # A leading ~ is the home (no shell expands it after "="); the command after -- runs there.
    ran = await sb.agent.exec(
        "gnome-terminal --working-directory=~/Music -- bash -c 'pwd > /tmp/wd; exec sleep 600'", keep_background=True
    )
    assert ran.exit_code == 0, ran.stderr

    async def wrote() -> bool:
        return (await sb.agent.exec("cat /tmp/wd")).stdout == "/home/user/Music\n"

    await eventually(wrote, 20, "the command run in the terminal's working directory")
    version = await _out(sb.agent, "google-chrome --version")
    assert version.startswith("Chromium "), version
    assert (await _out(sb.agent, "google-chrome-stable --version")) == version
