#!/usr/bin/env bash
# Runs the whole test suite against the real Docker engine, then checks nothing was left behind.
# pytest's exit 5 (no test ran) is a failure here, like any other non-zero exit.
set -uo pipefail
cd "$(dirname "$0")/.."

run_id=$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
export SANDBOX_TEST_RUN_ID=$run_id

.venv/bin/python -m pytest -ra --durations=40 -p no:cacheprovider "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: pytest ran no test; that is a failure" >&2
fi

leaked=$(docker ps -aq --filter "label=sandbox.owner=test-$run_id")
if [[ -n $leaked ]]; then
    echo "test.sh: containers leaked by this run: $leaked" >&2
    docker rm -f $leaked >/dev/null
    [[ $rc -eq 0 ]] && rc=1
fi
if [[ -d /run/sbx-test-$run_id ]]; then
    echo "test.sh: socket directory /run/sbx-test-$run_id leaked" >&2
    rm -rf "/run/sbx-test-$run_id"
    [[ $rc -eq 0 ]] && rc=1
fi
exit $rc
