#!/usr/bin/env bash
# Stands in for the countersink binary in the Spark job's tasks (shipped with --files, named
# by --binary). The first call for part $KILL_PART (e.g. `5/16`) starts the real binary
# ($COUNTERSINK_REAL) and kills it with SIGKILL a moment later, so that the task fails
# without a report and Spark runs it again; the marker directory $KILL_MARKER (made
# atomically by mkdir) says it happened, and `how` in it whether the binary was still
# running when killed. Every other call is the real binary.
set -u
if [[ " $* " == *" --slice $KILL_PART "* ]] && mkdir "$KILL_MARKER" 2>/dev/null; then
    "$COUNTERSINK_REAL" "$@" >/dev/null 2>&1 &
    child=$!
    sleep 0.1
    if kill -9 "$child" 2>/dev/null; then
        echo "killed while running" >"$KILL_MARKER/how"
    else
        echo "killed after it had exited (its report discarded)" >"$KILL_MARKER/how"
    fi
    wait "$child"
    exit 137
fi
exec "$COUNTERSINK_REAL" "$@"
