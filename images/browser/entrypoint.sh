#!/bin/bash
# Browser sandbox: Xvfb, x11vnc (localhost:5900), Chromium filling the screen with DevTools on 127.0.0.1:9222,
# then the agent. Runs under docker-init as the sandbox user.
set -u
SANDBOX_KIND="${SANDBOX_KIND:-browser}"
# shellcheck source=images/common/lib.sh
source /opt/sandbox/lib.sh
CDP_PORT=9222

start_chromium() {
    local width height
    IFS=x read -r width height _ <<<"$SCREEN"
    # --test-type hides the "unsupported command-line flag: --no-sandbox" bar that would cover the page.
    # SANDBOX_CHROMIUM_FLAGS (word-split) adds flags.
    # shellcheck disable=SC2086
    start chromium chromium --no-sandbox --test-type --no-first-run --disable-gpu --disable-dev-shm-usage \
        --disable-background-networking --disable-component-update --disable-sync --disable-default-apps \
        --no-default-browser-check --password-store=basic \
        --remote-debugging-port="$CDP_PORT" --remote-debugging-address=127.0.0.1 \
        --user-data-dir="$PROFILE_DIR" --window-position=0,0 --window-size="$width,$height" --start-maximized \
        ${SANDBOX_CHROMIUM_FLAGS:-} about:blank
    # With no window manager Chromium makes a screen-sized window 1 px smaller each way; set the size afterwards.
    start chromium-fit timeout 60 xdotool search --sync --onlyvisible --class chromium windowsize %@ "$width" "$height"
}

begin
prepare_chromium_profile || say "could not write the Chromium preferences"
if start_x; then
    start_vnc
    start_chromium
fi
start_agent
supervise
