#!/bin/bash
# Terminal sandbox: just the agent. Runs under docker-init as the sandbox user. The agent is not restarted: if it
# dies, health checks see it dead, and this shell stays up until the container is stopped.
set -u

SANDBOX_KIND="${SANDBOX_KIND:-terminal}"
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

mkdir -p "$LOG_DIR"
trap stop_all TERM INT
say "kind=$SANDBOX_KIND"

# No X server here: DISPLAY stays unset for the shell; the agent ignores --display for this kind.
start agent python3 -m sandbox.agent --kind "$SANDBOX_KIND" --socket "$AGENT_SOCKET" \
    --display "${SANDBOX_DISPLAY:-:0}"

supervise
