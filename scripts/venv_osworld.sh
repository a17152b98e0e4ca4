#!/usr/bin/env bash
# The OSWorld test venv: .venv-osworld, with OSWorld's harness (desktop-env 1.0.2) on top of the main .venv.
#
# - desktop-env is installed with --no-deps: its full dependency list (torch, easyocr, librosa, cloud SDKs, ...)
#   is gigabytes, and the harness needs little of it.
# - The main .venv's packages (the platform, requests, numpy, pandas, playwright, gymnasium, pillow, ...) are
#   visible through a .pth file (site.addsitedir), after this venv's own: nothing is installed twice.
# - REAL lists what OSWorld's controller, setup controller and the evaluators of tasks/osworld import and call.
# - STUBS are the modules that only other metrics and getters (or the cloud providers) import: desktop_env imports
#   every metric module when it starts, so each becomes an import stub (_osworld_stubs.py) whose every attribute
#   is a placeholder that raises, naming the module, when called or instantiated. A real install of the same name
#   wins over its stub (the stub finder is the last on sys.meta_path).
# Idempotent: a stamp records what was installed; nothing is done when it is current.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAIN=$ROOT/.venv
VENV=${OSWORLD_VENV:-$ROOT/.venv-osworld}
DESKTOP_ENV=desktop-env==1.0.2
REAL=(requests-toolbelt==1.0.0 python-dotenv==1.0.1 tldextract==5.1.2 requests-file==2.1.0 idna filelock rapidfuzz
    lxml cssselect pytz xmltodict psutil)
STUBS=(easyocr torch torchvision librosa fastdtw acoustid mutagen cv2 skimage scipy imagehash fitz pypdf PyPDF2
    pdfplumber borb docx pptx odf openpyxl formulas bs4 pydrive boto3 botocore azure alibabacloud_ecs20140526
    alibabacloud_tea_openapi alibabacloud_tea_util volcenginesdkcore volcenginesdkecs volcenginesdkautoscaling
    docker tqdm googleapiclient google_auth_oauthlib)
WANT="$DESKTOP_ENV ${REAL[*]} | ${STUBS[*]} | $(readlink -f "$MAIN")"
STAMP=$VENV/.osworld-installed

step() { echo "==> $*"; }

[[ -x $MAIN/bin/python ]] || { echo "venv_osworld: $MAIN is missing: run scripts/setup.sh first" >&2; exit 1; }
if [[ -f $STAMP && $(cat "$STAMP") == "$WANT" ]]; then
    step "osworld venv: up to date ($VENV)"
    exit 0
fi

if [[ ! -x $VENV/bin/python ]]; then
    step "osworld venv: creating $VENV"
    base=$("$MAIN/bin/python" -c 'import sys; print(sys.base_prefix)')/bin/python3
    "$base" -m venv "$VENV"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
main_site=$("$MAIN/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

step "osworld venv: installing $DESKTOP_ENV (no deps) and ${REAL[*]}"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps)
"${pip[@]}" "$DESKTOP_ENV" "${REAL[@]}"

# This checkout (its `sandbox` before the main venv's editable install of it), the main venv's packages after
# this venv's own, and the stubs' finder.
printf '%s\nimport site; site.addsitedir(%s)\n' "$ROOT" "'$main_site'" >"$site/zz_sandbox_main_venv.pth"
printf 'import _osworld_stubs; _osworld_stubs.install(%s)\n' \
    "$(printf "'%s'," "${STUBS[@]}" | sed 's/^/[/; s/,$/]/')" >"$site/zz_osworld_stubs.pth"
cat >"$site/_osworld_stubs.py" <<'PY'
"""Import stubs for the modules desktop_env imports but the tasks under test never call (written by
scripts/venv_osworld.sh). Importing one works; calling or instantiating anything from it raises, naming it."""

import importlib.abc
import importlib.machinery
import sys
import types


class StubUsed(ImportError):
    pass


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise StubUsed(f"{cls.__qualname__} is an import stub in the OSWorld test venv: install the real package "
                       "(scripts/venv_osworld.sh, REAL) to use it")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def _stub(qualname):
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "__module__": "_osworld_stubs"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def install(names):
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder(names))
PY

"$VENV/bin/python" -c 'import desktop_env.desktop_env, sandbox.compat.osworld' ||
    { echo "venv_osworld: desktop_env does not import in $VENV" >&2; exit 1; }
echo "$WANT" >"$STAMP"
step "osworld venv: ready ($VENV/bin/python)"
