#!/usr/bin/env bash
# The SWE-ReX test venv, .venv-swerex: swe-rex 1.4.0 (and its dependencies) from the package index, plus the project
# and the main .venv's packages (grpc, protobuf, httpx, ...) through a .pth file, so that the side-by-side test
# (tests/compat/test_swerex_side_by_side.py) runs SWE-ReX's own LocalRuntime and this platform's SandboxRuntime with
# one interpreter, and needs no network when it runs. Idempotent: one line when there is nothing to do.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$ROOT/.venv-swerex
MAIN=$ROOT/.venv
SWEREX=swe-rex==1.4.0

[[ -x $MAIN/bin/python ]] || { echo "venv_swerex: $MAIN is missing; run scripts/setup.sh first" >&2; exit 1; }
main_site=$("$MAIN/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

if [[ ! -x $VENV/bin/python ]]; then
    echo "==> swe-rex venv: creating $VENV"
    base=$("$MAIN/bin/python" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')
    "$base" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("swe-rex") != "1.4.0")' 2>/dev/null; then
    echo "==> swe-rex venv: installing $SWEREX"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SWEREX"
else
    echo "==> swe-rex venv: $SWEREX installed"
fi
# The project's checkout first, then the main venv's packages (after the venv's own: swe-rex's pins win).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$ROOT" "$main_site" >"$site/sandbox-main-venv.pth"
"$VENV/bin/python" -c 'import swerex.runtime.local, grpc, sandbox.compat.swerex' ||
    { echo "venv_swerex: $VENV cannot import swerex, grpc and sandbox.compat.swerex" >&2; exit 1; }
