#!/usr/bin/env bash
# A rank that dies, hangs or errors must end the whole two-rank job with a clear message within
# a bounded time (the dist timeout is 2 s here; 30 s is the bound we hold it to).
# Usage: dist_fault_check.sh MPIEXEC DIST_FAULT
set -u
mpiexec=$1 prog=$2
status=0
check() { # mode, expected text in the output
    local start=$SECONDS out rc
    out=$(timeout 60 "$mpiexec" -np 2 "$prog" "$1" 2>&1)
    rc=$?
    local took=$((SECONDS - start))
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $took -gt 30 ] || ! grep -q -- "$2" <<<"$out"; then
        echo "FAIL $1: exit $rc after ${took}s; expected a non-zero exit within 30 s and '$2' in:"
        echo "$out"
        status=1
    else
        echo "ok $1: exit $rc after ${took}s"
    fi
}
check die "exited"
check hang "timed out after 2 s"
check error "step 3: gradient is not finite"
[ $status -eq 0 ] && echo "3 passed, 0 failed" || echo "some failed"
exit $status
