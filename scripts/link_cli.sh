#!/usr/bin/env bash
# Puts the `sandbox` command on the PATH: links $SANDBOX_BIN_DIR/sandbox (default /usr/local/bin/sandbox) to this
# checkout's .venv/bin/sandbox when that directory is writable and holds no other `sandbox`. It never replaces a file
# or a link of someone else's (only a dangling link to a venv's sandbox, left by a checkout since moved or deleted),
# says what it did and exits 0 whatever happened: the venv's path works in any case.
#   scripts/link_cli.sh         make the link (or say why not); setup.sh runs it
#   scripts/link_cli.sh --how   print how to call the CLI: `sandbox` when that is this checkout's, else the venv's
#                               path (relative when run from the checkout, as make does)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=$ROOT/.venv/bin/sandbox
BIN_DIR=${SANDBOX_BIN_DIR:-/usr/local/bin}
LINK=$BIN_DIR/sandbox

say() { echo "==> cli: $*"; }

ours_on_path() { # `sandbox` as the PATH finds it is this checkout's
    local found
    found=$(command -v sandbox 2>/dev/null) && [[ $found -ef $TARGET ]]
}

how() {
    if ours_on_path; then
        echo sandbox
    elif [[ $PWD == "$ROOT" ]]; then
        echo .venv/bin/sandbox
    else
        echo "$TARGET"
    fi
}

describe() { # what is at $LINK, in words
    if [[ -L $LINK ]]; then
        echo "a link to $(readlink "$LINK")"
    elif [[ -d $LINK ]]; then
        echo "a directory"
    else
        echo "a file"
    fi
}

stale_link() { # a dangling link to some checkout's .venv/bin/sandbox: ours to replace
    [[ -L $LINK && ! -e $LINK && $(readlink "$LINK") == */.venv/bin/sandbox ]]
}

path_note() { # the link is made or was there: is it what `sandbox` runs?
    local found
    if ours_on_path; then
        return
    fi
    if ! found=$(command -v sandbox 2>/dev/null); then
        say "note: $BIN_DIR is not on PATH; add it, or call $TARGET"
    else
        say "note: \`sandbox\` on PATH is $found, found before $LINK; call $TARGET"
    fi
}

link() {
    if [[ ! -x $TARGET ]]; then
        say "$TARGET is missing (setup makes the venv); not linking"
        return
    fi
    if [[ -e $LINK || -L $LINK ]]; then
        if [[ $LINK -ef $TARGET ]]; then
            say "$LINK -> $TARGET (already)"
            path_note
            return
        fi
        if ! stale_link; then
            say "left $LINK alone: it is $(describe), not this checkout's; call $TARGET"
            return
        fi
        say "replacing $LINK, a dangling link to $(readlink "$LINK")"
        rm -f "$LINK" || {
            say "cannot remove $LINK; call $TARGET"
            return
        }
    fi
    if [[ ! -d $BIN_DIR ]]; then
        say "no directory $BIN_DIR; call $TARGET"
        return
    fi
    if [[ ! -w $BIN_DIR ]]; then
        say "cannot write to $BIN_DIR; call $TARGET, or link it yourself: sudo ln -s $TARGET $LINK"
        return
    fi
    if ln -s "$TARGET" "$LINK" 2>/dev/null; then
        say "linked $LINK -> $TARGET"
        path_note
    else
        say "could not link $LINK (made meanwhile?); call $TARGET"
    fi
}

case ${1:-} in
--how) how ;;
"") link ;;
*)
    echo "usage: $0 [--how]" >&2
    exit 2
    ;;
esac
exit 0
