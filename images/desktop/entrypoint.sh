#!/bin/bash
# Desktop sandbox: session bus, Xvfb, the wallpaper and the panel, openbox, the VNC port (localhost:5900: x11vnc
# starts with the first viewer), then the agent and OSWorld's in-VM HTTP API (127.0.0.1:5000,
# sandbox.agent.osworld_api). Runs under docker-init as the sandbox
# user, `user` with home /home/user as on OSWorld's VM (/home/sandbox links there). SANDBOX_DESKTOP_PLAIN=1 (the
# spec's env): no wallpaper and no panel, a black screen with the window manager only. SANDBOX_OSWORLD_API=0: no
# OSWorld API; SANDBOX_OSWORLD_API_LISTEN=HOST:PORT: serve it elsewhere.
set -u
SANDBOX_KIND="${SANDBOX_KIND:-desktop}"
# shellcheck source=images/common/lib.sh
source /opt/sandbox/lib.sh
# Chromium started from the desktop (menu, shell, agent) runs unprivileged in a container.
export CHROMIUM_FLAGS="${CHROMIUM_FLAGS:-} --no-sandbox --disable-dev-shm-usage --disable-gpu --no-first-run \
--no-default-browser-check --password-store=basic --test-type"

start_session_bus() {
    local dir=/tmp/sandbox-dbus i
    mkdir -p "$dir"
    # The image's ENV names the same address, for docker exec sessions.
    export DBUS_SESSION_BUS_ADDRESS="unix:path=$dir/session"
    start dbus dbus-daemon --session --nofork --nopidfile --address="$DBUS_SESSION_BUS_ADDRESS"
    for ((i = 0; i < 50; i++)); do
        [[ -S $dir/session ]] && return 0
        sleep 0.1
    done
    say "session bus did not come up within 5s"
}

DESKTOP_DIR=/opt/sandbox/desktop # look.py (the wallpaper), tint2rc (the panel), applications/ (its launchers),
# vnc-connect.sh (a VNC viewer's connection)
# No GLX: nothing here renders with OpenGL (Chromium runs with --disable-gpu), and Xvfb's GLX loads Mesa's software
# renderer and LLVM, 11 MB of each desktop's memory (54 MB of its X server's resident set)
XVFB_ARGS="-extension GLX"
DOWNLOADS_DIR=$HOME/Downloads    # Chromium's, as on OSWorld's VM
OPENBOX_CONFIG=/tmp/sandbox-openbox/rc.xml

write_openbox_config() { # Debian's rc.xml plus OSWorld's (Ubuntu's) ctrl+alt+t: a terminal titled "Terminal", in ~
    mkdir -p "${OPENBOX_CONFIG%/*}"
    sed 's|^\( *\)</keyboard>|\1  <keybind key="C-A-t"><action name="Execute"><command>sh -c "cd \&amp;\&amp; exec gnome-terminal"</command></action></keybind>\n\1</keyboard>|' \
        /etc/xdg/openbox/rc.xml >"$OPENBOX_CONFIG" && grep -q 'key="C-A-t"' "$OPENBOX_CONFIG" && return 0
    say "could not add ctrl+alt+t to openbox's configuration"
    OPENBOX_CONFIG=""
}

start_osworld_api() { # OSWorld's in-VM API (its controller's /screenshot, /execute, /setup/...), from the home folder
    [[ ${SANDBOX_OSWORLD_API:-1} == 0 ]] && return 0
    start osworld-api python3 -m sandbox.agent.osworld_api --listen "${SANDBOX_OSWORLD_API_LISTEN:-127.0.0.1:5000}"
}

start_vnc_on_demand() { # localhost only: the control plane reaches it through the agent's tunnel
    start vnc socat TCP-LISTEN:5900,bind=127.0.0.1,reuseaddr,fork EXEC:"bash $DESKTOP_DIR/vnc-connect.sh"
}

start_session_look() { # the wallpaper and the panel (tint2rc: launchers and a clock), drawn before the window manager
    # starts, so the desktop's first screenshot (the agent reports healthy once the window manager is up) shows them;
    # openbox takes in the windows already mapped when it starts
    local desktops
    [[ ${SANDBOX_DESKTOP_PLAIN:-0} == 1 ]] && return 0
    # Until finish_session_look removes it, the agent does not report the desktop healthy: the first screenshot a
    # caller takes then shows the panel as the window manager left it (openbox taking the panel in redraws it).
    xprop -root -f _SANDBOX_SESSION_PENDING 32c -set _SANDBOX_SESSION_PENDING 1
    # tint2 waits for a window manager's _NET_NUMBER_OF_DESKTOPS, checking once a second, and openbox keeps the
    # root window's value when it starts: the value of openbox's configuration lets the panel start first.
    desktops=$(sed -n 's:.*<number>\([0-9]\+\)</number>.*:\1:p' /etc/xdg/openbox/rc.xml 2>/dev/null | head -n 1)
    xprop -root -f _NET_NUMBER_OF_DESKTOPS 32c -set _NET_NUMBER_OF_DESKTOPS "${desktops:-4}"
    # The panel's window has no _NET_WM_PID, so a snapshot's autostart list never records it (no second panel).
    start panel tint2 -c "$DESKTOP_DIR/tint2rc"
    python3 "$DESKTOP_DIR/look.py" --wait 3 >>"$LOG_DIR/look.log" 2>&1 ||
        say "no wallpaper, or no panel drawn (see $LOG_DIR/panel.log): $(tail -c 300 "$LOG_DIR/look.log")"
}

finish_session_look() { # the panel drawn again once the window manager has taken it in; then the agent may say healthy
    [[ ${SANDBOX_DESKTOP_PLAIN:-0} == 1 ]] && return 0
    python3 "$DESKTOP_DIR/look.py" --panel-only --wait 3 >>"$LOG_DIR/look.log" 2>&1 ||
        say "the panel did not draw itself again after the window manager started: $(tail -c 300 "$LOG_DIR/look.log")"
    xprop -root -remove _SANDBOX_SESSION_PENDING
}

begin
start_session_bus
prepare_chromium_profile || say "could not write the Chromium preferences"
write_openbox_config
if start_x; then
    start_agent # now, so its start-up overlaps the window manager's; it reports healthy once both are up
    start_session_look
    start_wm
    finish_session_look
    start_vnc_on_demand
    start_osworld_api # last: its start-up does not compete with the first frame's (OSWorld's harness polls for it)
    run_autostart
else
    start_agent
fi
supervise
