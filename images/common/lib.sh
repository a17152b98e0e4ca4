# Shared by every image's entrypoint (installed as /opt/sandbox/lib.sh). Services run in the background with their
# output in $LOG_DIR/<name>.log; nothing is restarted: a dead service stays dead for health checks to see, and the
# entrypoint shell stays up (reporting exits) until the container is stopped.
# shellcheck shell=bash

SCREEN="${SANDBOX_SCREEN:-1280x800x24}"
export DISPLAY="${SANDBOX_DISPLAY:-${DISPLAY:-:0}}"
export HOME="${HOME:-/home/sandbox}"
export PYTHONPATH="${PYTHONPATH:-/opt/sandbox-agent}"
LOG_DIR=/tmp/sandbox-logs
AGENT_SOCKET=/run/sandbox/agent.sock
PROFILE_DIR=$HOME/.config/chromium

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

begin() { # begin: the first call of every entrypoint
    mkdir -p "$LOG_DIR"
    trap stop_all TERM INT
    say "kind=$SANDBOX_KIND display=$DISPLAY screen=$SCREEN"
}

start_agent() { # TCP, if any, comes from the environment: SANDBOX_AGENT_LISTEN (HOST:PORT), SANDBOX_AGENT_TOKEN_FILE
    if [[ -n ${SANDBOX_AGENT_LISTEN:-} ]]; then
        # Exported so the agent sees them whether they came from the container's env or a wrapper script.
        export SANDBOX_AGENT_LISTEN SANDBOX_AGENT_TOKEN_FILE="${SANDBOX_AGENT_TOKEN_FILE:-}"
        say "agent also listens on tcp $SANDBOX_AGENT_LISTEN (token file ${SANDBOX_AGENT_TOKEN_FILE:-none})"
    fi
    start agent python3 -m sandbox.agent --kind "$SANDBOX_KIND" --socket "$AGENT_SOCKET" --display "$DISPLAY"
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

start_x() {
    local n i
    n=${DISPLAY#*:}
    n=${n%%.*}
    rm -f "/tmp/.X$n-lock" "/tmp/.X11-unix/X$n"
    mkdir -p /tmp/.X11-unix 2>/dev/null
    # -noreset: by default Xvfb resets when its last client leaves, so the probe below would race every next client.
    # shellcheck disable=SC2086 # XVFB_ARGS: an entrypoint's extra options, split on spaces
    start xvfb Xvfb "$DISPLAY" -screen 0 "$SCREEN" -nolisten tcp -ac -noreset ${XVFB_ARGS:-}
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

start_wm() { # openbox ($OPENBOX_CONFIG: its rc.xml); programs started before it manages the screen can stay unseen
    local i
    start openbox openbox --sm-disable ${OPENBOX_CONFIG:+--config-file "$OPENBOX_CONFIG"}
    for ((i = 0; i < 100; i++)); do
        # The check window appears a moment before openbox manages new windows; _NET_WORKAREA comes after.
        if xprop -root _NET_SUPPORTING_WM_CHECK 2>/dev/null | grep -q "window id" &&
            xprop -root _NET_WORKAREA 2>/dev/null | grep -q "="; then
            say "window manager ready"
            return 0
        fi
        sleep 0.05
    done
    say "window manager did not take the screen within 5s; its log: $(tail -c 600 "$LOG_DIR/openbox.log")"
    return 1
}

start_vnc() { # localhost only: the control plane reaches it through the agent's tunnel
    start x11vnc x11vnc -display "$DISPLAY" -localhost -rfbport 5900 -forever -shared -nopw -noxdamage -quiet
}

prepare_chromium_profile() { # downloads land in $DOWNLOADS_DIR (/workspace); a profile from a snapshot starts clean
    mkdir -p "$PROFILE_DIR/Default"
    rm -f "$PROFILE_DIR/SingletonLock" "$PROFILE_DIR/SingletonSocket" "$PROFILE_DIR/SingletonCookie"
    python3 - "$PROFILE_DIR/Default/Preferences" "${DOWNLOADS_DIR:-/workspace}" <<'EOF'
import json
import sys

path, downloads = sys.argv[1:3]
try:
    with open(path) as f:
        prefs = json.load(f)
except (OSError, ValueError):
    prefs = {}
prefs.setdefault("download", {}).update(
    {"default_directory": downloads, "prompt_for_download": False, "directory_upgrade": True}
)
prefs.setdefault("savefile", {})["default_directory"] = downloads
prefs.setdefault("profile", {}).update({"exit_type": "Normal", "exited_cleanly": True})
prefs.setdefault("translate", {})["enabled"] = False
with open(path, "w") as f:
    json.dump(prefs, f)
EOF
}

run_autostart() { # programs a snapshot recorded (one command line each), started again on boot
    local file=$HOME/.config/sandbox/autostart line i=0
    [[ -f $file ]] || return 0
    while IFS= read -r line; do
        [[ -n $line ]] || continue
        i=$((i + 1))
        start "autostart-$i" bash -c "exec $line"
    done <"$file"
}
