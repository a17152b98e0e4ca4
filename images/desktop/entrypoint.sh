#!/bin/bash
# Desktop sandbox: session bus, Xvfb, openbox, x11vnc (localhost:5900), then the agent.
# Runs under docker-init as the sandbox user.
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

begin
start_session_bus
prepare_chromium_profile || say "could not write the Chromium preferences"
if start_x; then
    start_agent # now, so its start-up overlaps the window manager's; it reports healthy once both are up
    start_wm
    start_vnc
    run_autostart
else
    start_agent
fi
supervise
