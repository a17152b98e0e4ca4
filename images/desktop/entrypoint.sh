#!/bin/bash
# Desktop sandbox: session bus, Xvfb, openbox, x11vnc (localhost:5900), then the agent.
# Runs under docker-init as the sandbox user. Nothing is restarted: a dead service stays dead for health checks
# to see, and this shell stays up (reporting exits) until the container is stopped.
set -u

SANDBOX_KIND="${SANDBOX_KIND:-desktop}"
SCREEN="${SANDBOX_SCREEN:-1280x800x24}"
export DISPLAY="${SANDBOX_DISPLAY:-${DISPLAY:-:0}}"
export HOME="${HOME:-/home/sandbox}"
export PYTHONPATH="${PYTHONPATH:-/opt/sandbox-agent}"
LOG_DIR=/tmp/sandbox-logs
AGENT_SOCKET=/run/sandbox/agent.sock

declare -A NAMES=()

say() { echo "[entrypoint] $*"; }

start() { # start NAME COMMAND...: run in the background, output to $LOG_DIR/NAME.log
    local name=$1
    shift
    "$@" >>"$LOG_DIR/$name.log" 2>&1 &
    NAMES[$!]=$name
    say "started $name (pid $!)"
}

stop_all() {
    local pids
    say "stopping"
    trap - TERM INT
    mapfile -t pids < <(jobs -p)
    ((${#pids[@]} == 0)) || kill -TERM "${pids[@]}" 2>/dev/null
    wait
    exit 0
}

supervise() { # report each exit, restart nothing, stay up when nothing is left
    local pid rc
    while :; do
        pid=""
        wait -n -p pid
        rc=$?
        [[ -n ${pid:-} ]] || break
        say "${NAMES[$pid]:-pid $pid} exited with code $rc"
    done
    say "no services left running; staying up"
    while :; do
        sleep 3600 &
        wait $!
    done
}

display_number() {
    local n=${DISPLAY#*:}
    echo "${n%%.*}"
}

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

start_x() {
    local n i
    n=$(display_number)
    rm -f "/tmp/.X$n-lock" "/tmp/.X11-unix/X$n"
    mkdir -p /tmp/.X11-unix 2>/dev/null
    start xvfb Xvfb "$DISPLAY" -screen 0 "$SCREEN" -nolisten tcp -ac
    for ((i = 0; i < 100; i++)); do
        if xdpyinfo >/dev/null 2>&1; then
            say "X server ready on $DISPLAY ($SCREEN)"
            return 0
        fi
        sleep 0.1
    done
    say "X server on $DISPLAY did not answer within 10s"
    return 1
}

prepare_chromium_profile() { # downloads land in /workspace; a profile copied from a snapshot starts clean
    local dir=$HOME/.config/chromium
    mkdir -p "$dir/Default"
    rm -f "$dir/SingletonLock" "$dir/SingletonSocket" "$dir/SingletonCookie"
    python3 - "$dir/Default/Preferences" <<'EOF'
import json
import sys

path = sys.argv[1]
try:
    with open(path) as f:
        prefs = json.load(f)
except (OSError, ValueError):
    prefs = {}
prefs.setdefault("download", {}).update(
    {"default_directory": "/workspace", "prompt_for_download": False, "directory_upgrade": True}
)
prefs.setdefault("savefile", {})["default_directory"] = "/workspace"
prefs.setdefault("profile", {}).update({"exit_type": "Normal", "exited_cleanly": True})
prefs.setdefault("translate", {})["enabled"] = False
with open(path, "w") as f:
    json.dump(prefs, f)
EOF
}

mkdir -p "$LOG_DIR"
trap stop_all TERM INT
say "kind=$SANDBOX_KIND display=$DISPLAY screen=$SCREEN"

start_session_bus
prepare_chromium_profile || say "could not write the Chromium preferences"
if start_x; then
    start openbox openbox --sm-disable
    start x11vnc x11vnc -display "$DISPLAY" -localhost -rfbport 5900 -forever -shared -nopw -noxdamage -quiet
fi
start agent python3 -m sandbox.agent --kind "$SANDBOX_KIND" --socket "$AGENT_SOCKET" --display "$DISPLAY"

supervise
