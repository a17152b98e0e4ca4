#!/bin/bash
# Terminal sandbox: just the agent. Runs under docker-init as the sandbox user.
set -u
SANDBOX_KIND="${SANDBOX_KIND:-terminal}"
# shellcheck source=images/common/lib.sh
source /opt/sandbox/lib.sh

begin
start_agent
supervise
