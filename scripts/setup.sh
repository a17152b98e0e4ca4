#!/usr/bin/env bash
# Prepares this machine for development and tests: Debian packages, a running dockerd, the virtualenv, the `sandbox`
# command on the PATH (a link, where nothing else is in its place) and the sandbox images (every kind's and every
# variant's, e.g. terminal-jupyter: `sandbox images build` with no kind).
# Idempotent; one line per step when there is nothing to do.
#   SANDBOX_SKIP_IMAGES=1   skip building the images
#   SANDBOX_BIN_DIR=DIR     where to link the `sandbox` command (default /usr/local/bin; scripts/link_cli.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$ROOT/.venv
STAMP=$VENV/.installed
DEB_PACKAGES=(docker.io mmdebstrap redis-server chromium xvfb x11vnc novnc websockify python3-venv make git docker-registry adb curl)
DOCKERD_LOG=/var/log/sandbox-dockerd.log
DOCKERD_PIDFILE=/var/run/sandbox-dockerd.pid
DOCKERD_WAIT=60

step() { echo "==> $*"; }
die() {
    echo "setup: $*" >&2
    exit 1
}

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

missing_packages() {
    local p
    for p in "${DEB_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qx 'install ok installed' || echo "$p"
    done
}

install_packages() {
    local missing
    mapfile -t missing < <(missing_packages)
    if [[ ${#missing[@]} -eq 0 ]]; then
        step "debian packages: installed"
        return
    fi
    step "debian packages: installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# live-restore: containers keep running while dockerd restarts (an upgrade, a crash), so sandboxes keep their
# processes and files. The daemon reloads this setting on SIGHUP; set it for production engines too.
DOCKERD_CONFIG=/etc/docker/daemon.json

configure_dockerd() {
    as_root mkdir -p "$(dirname "$DOCKERD_CONFIG")"
    as_root python3 - "$DOCKERD_CONFIG" <<'PY'
import json, os, sys
path = sys.argv[1]
config = {}
if os.path.exists(path):
    with open(path) as f:
        text = f.read()
    config = json.loads(text) if text.strip() else {}
if config.get("live-restore") is not True:
    config["live-restore"] = True
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
    print("==> docker: live-restore enabled in " + path)
PY
}

ensure_live_restore() {
    local pid
    [[ $(docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null) == true ]] && return
    if [[ -f $DOCKERD_PIDFILE ]] && pid=$(cat "$DOCKERD_PIDFILE") && kill -0 "$pid" 2>/dev/null; then
        as_root kill -HUP "$pid"  # our dockerd: reload its configuration
        sleep 1
    fi
    if [[ $(docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null) != true ]]; then
        echo "setup: warning: dockerd runs without live-restore; sandboxes stop when it restarts" >&2
    fi
}

start_dockerd() {
    local i pid
    if docker info >/dev/null 2>&1; then
        step "docker: running"
        return
    fi
    step "docker: starting dockerd (log $DOCKERD_LOG)"
    if [[ -f $DOCKERD_PIDFILE ]]; then
        pid=$(cat "$DOCKERD_PIDFILE")
        kill -0 "$pid" 2>/dev/null || as_root rm -f "$DOCKERD_PIDFILE"
    fi
    as_root setsid sh -c "exec dockerd --pidfile='$DOCKERD_PIDFILE' >>'$DOCKERD_LOG' 2>&1" </dev/null &
    for ((i = 0; i < DOCKERD_WAIT; i++)); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    tail -n 20 "$DOCKERD_LOG" >&2 || true
    die "dockerd did not answer within ${DOCKERD_WAIT}s; see $DOCKERD_LOG"
}

find_python() {
    local candidate
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    return 1
}

setup_venv() {
    local python
    if [[ ! -x $VENV/bin/python ]]; then
        python=$(find_python) || die "Python >= 3.11 is needed (python3.11 on PATH)"
        step "venv: creating $VENV with $python and installing '.[dev]'"
        "$python" -m venv "$VENV"
    elif [[ ! -f $STAMP || $ROOT/pyproject.toml -nt $STAMP ]]; then
        step "venv: pyproject.toml changed, installing '.[dev]'"
    else
        step "venv: up to date"
        return
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "${ROOT}[dev]"
    touch "$STAMP"
}

link_cli() { # `sandbox` on the PATH, when that can be done without replacing anything
    bash "$ROOT/scripts/link_cli.sh"
}

generate_stubs() {
    step "grpc stubs: generating from proto/"
    bash "$ROOT/scripts/gen_proto.sh" >/dev/null
}

build_images() {
    if [[ ${SANDBOX_SKIP_IMAGES:-0} == 1 ]]; then
        step "images: skipped (SANDBOX_SKIP_IMAGES=1)"
        return
    fi
    if (cd "$ROOT" && "$VENV/bin/sandbox" images check >/dev/null); then
        step "images: up to date"
        return
    fi
    step "images: building"
    (cd "$ROOT" && "$VENV/bin/sandbox" images build)
}

install_packages
configure_dockerd
start_dockerd
ensure_live_restore
setup_venv
link_cli
generate_stubs
bash "$ROOT/scripts/venv_swerex.sh" # .venv-swerex: swe-rex 1.4.0 for tests/compat (docs/compat.md)
build_images
bash "$ROOT/scripts/venv_osworld.sh"  # .venv-osworld: OSWorld's harness for tests/compat (docs/compat.md)
