#!/bin/bash
# One VNC viewer's connection (entrypoint.sh's socat listens on 127.0.0.1:5900, the port the agent's tunnel reaches,
# and runs this for each connection, on its stdin and stdout). The first viewer starts x11vnc, which then serves
# every later one (-shared -forever) on a unix socket only it and this script use; a desktop nobody has viewed runs
# no x11vnc at all (about 6 MB of memory and a process polling the screen saved per desktop). x11vnc's own -inetd
# mode would start one per viewer, but that x11vnc does not always exit when its viewer leaves.
set -u
dir=/tmp/sandbox-vnc
socket=$dir/x11vnc.sock
log=${LOG_DIR:-/tmp/sandbox-logs}/x11vnc.log
mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9 # two viewers at once start one x11vnc
if [[ ! -S $socket ]] || ! kill -0 "$(cat "$dir/x11vnc.pid" 2>/dev/null)" 2>/dev/null; then
    rm -f "$socket"
    # Its own session: it outlives this connection, and socat's ending of this one does not reach it.
    setsid x11vnc -display "$DISPLAY" -unixsock "$socket" -rfbport 0 -forever -shared -nopw -noxdamage -quiet \
        </dev/null >>"$log" 2>&1 9>&- &
    echo $! >"$dir/x11vnc.pid"
    for ((i = 0; i < 200; i++)); do
        [[ -S $socket ]] && break
        sleep 0.025
    done
fi
exec 9>&-
exec socat STDIO "UNIX-CONNECT:$socket"
