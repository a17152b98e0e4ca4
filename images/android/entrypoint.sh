#!/bin/bash
# Android sandbox: a headless emulator (gRPC controller on 8554, console 5554, adb 5555) and the agent.
# Runs under docker-init as the sandbox user. Needs /dev/kvm from the host (docker run --device /dev/kvm).
set -u
SANDBOX_KIND="${SANDBOX_KIND:-android}"
# shellcheck source=images/common/lib.sh
source /opt/sandbox/lib.sh

SDK="${ANDROID_SDK_ROOT:-/opt/android-sdk}"
AVD="${SANDBOX_ANDROID_AVD:-sandbox}"
export ANDROID_AVD_HOME="${ANDROID_AVD_HOME:-$HOME/.android/avd}"
GRPC_PORT="${SANDBOX_ANDROID_GRPC_PORT:-8554}"
CONSOLE_PORT="${SANDBOX_ANDROID_CONSOLE_PORT:-5554}"
# SANDBOX_SCREEN (WxHxD) sizes the phone's display; a phone is portrait, so the default is 1080x1920.
read -r WIDTH HEIGHT _ <<<"$(tr 'x' ' ' <<<"${SANDBOX_ANDROID_SCREEN:-1080x1920x24}")"

make_avd() { # the AVD's files, written directly (no avdmanager, no Java): the first x86_64 system image found
    local sysdir
    sysdir=$(cd "$SDK" && find system-images -mindepth 3 -maxdepth 3 -type d -name x86_64 | sort | head -n 1)
    [[ -n $sysdir ]] || { say "no x86_64 system image under $SDK/system-images"; return 1; }
    mkdir -p "$ANDROID_AVD_HOME/$AVD.avd"
    printf 'avd.ini.encoding=UTF-8\npath=%s\ntarget=%s\n' "$ANDROID_AVD_HOME/$AVD.avd" \
        "$(cut -d/ -f2 <<<"$sysdir")" >"$ANDROID_AVD_HOME/$AVD.ini"
    cat >"$ANDROID_AVD_HOME/$AVD.avd/config.ini" <<CONFIG
abi.type=x86_64
hw.cpu.arch=x86_64
image.sysdir.1=$sysdir/
hw.lcd.width=$WIDTH
hw.lcd.height=$HEIGHT
hw.lcd.density=420
hw.keyboard=yes
hw.gpu.enabled=yes
hw.gpu.mode=swiftshader_indirect
hw.ramSize=2048
disk.dataPartition.size=4G
fastboot.forceColdBoot=no
CONFIG
    say "AVD $AVD from $sysdir (${WIDTH}x${HEIGHT})"
}

begin
[[ -e /dev/kvm ]] || say "warning: no /dev/kvm; the emulator will refuse to start (run with --device /dev/kvm)"
: >"$HOME/.emulator_console_auth_token" # an empty token: the console (127.0.0.1 only) asks for no auth
[[ -f $ANDROID_AVD_HOME/$AVD.avd/config.ini ]] || make_avd
start emulator "$SDK/emulator/emulator" -avd "$AVD" -no-window -no-audio -no-boot-anim \
    -gpu swiftshader_indirect -port "$CONSOLE_PORT" -grpc "$GRPC_PORT" \
    -skip-adb-auth -accel on
export SANDBOX_ANDROID_SERIAL="emulator-$CONSOLE_PORT" SANDBOX_ANDROID_GRPC="127.0.0.1:$GRPC_PORT"
export SANDBOX_ANDROID_CONSOLE_PORT="$CONSOLE_PORT"
start_agent
supervise
