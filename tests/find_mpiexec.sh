#!/bin/sh
# Prints the path the MPI tests run mpiexec by: the first mpiexec on PATH, its directory's
# symbolic links resolved (the file's own link, an alternatives entry, is kept). Exit 1 when
# PATH has none. Usage: find_mpiexec.sh
#
# Why: Open MPI takes an absolute argv[0] as an implicit --prefix, the parent of its
# directory. On merged-/usr systems /bin links to usr/bin, and a PATH listing /bin first finds
# /bin/mpiexec: prefix "/", which Open MPI refuses ("A prefix was supplied to mpiexec that only
# contained slashes"). /usr/bin/mpiexec gives /usr, its real install prefix.
set -eu
found=$(command -v mpiexec) || exit 1
case $found in
/*) ;;
*) exit 1 ;; # a shell function or alias: not a program to run
esac
dir=$(cd "$(dirname "$found")" && pwd -P)
printf '%s/%s\n' "$dir" "$(basename "$found")"
