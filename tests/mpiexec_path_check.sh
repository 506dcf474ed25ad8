#!/usr/bin/env bash
# The MPI suite's mpiexec works whatever the order of PATH: under PATH=/bin:/usr/bin (which on
# merged-/usr systems finds /bin/mpiexec, an implicit --prefix of "/" to Open MPI) and
# /usr/bin:/bin, the mpiexec that FIND_MPIEXEC picks (as tests/meson.build does when
# configuring) runs two processes. The OMPI_* variables of the suite are passed on.
# Usage: mpiexec_path_check.sh FIND_MPIEXEC
set -euo pipefail
find_mpiexec=$1
mapfile -t ompi_env < <(env | grep '^OMPI_' || true)
failures=0
for path in /bin:/usr/bin /usr/bin:/bin; do
    run=(env -i "PATH=$path" "HOME=${HOME:-/}" "${ompi_env[@]}")
    if ! mpiexec=$("${run[@]}" "$find_mpiexec"); then
        echo "FAIL: PATH=$path: $find_mpiexec found no mpiexec"; failures=$((failures + 1))
        continue
    fi
    if out=$("${run[@]}" "$mpiexec" -np 2 /bin/sh -c 'echo ran' 2>&1) &&
        [ "$(grep -c '^ran$' <<<"$out")" -eq 2 ]; then
        echo "ok: PATH=$path: $mpiexec ran 2 processes"
    else
        echo "FAIL: PATH=$path: $mpiexec -np 2 did not run 2 processes:"; echo "$out"
        failures=$((failures + 1))
    fi
done
[ "$failures" -eq 0 ]
