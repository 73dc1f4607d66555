#!/usr/bin/env bash
# The project's launch helper: `scripts/mpirun.sh -np N <program> [args...]`.
# Adds what Open MPI needs on this kind of machine so a user does not have to remember it:
#   --allow-run-as-root  when running as root;
#   --oversubscribe      always (more ranks than cores time-share; harmless otherwise);
#   --bind-to none       so oversubscribed ranks are not pinned to the same core;
#   shared memory + self transports for single-host runs (set STARRING_MPI_ARGS to override,
#   e.g. for a hostfile: STARRING_MPI_ARGS="--hostfile hosts").
set -euo pipefail
args=(--oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then args+=(--allow-run-as-root); fi
if [ -n "${STARRING_MPI_ARGS:-}" ]; then
  # shellcheck disable=SC2206
  args+=(${STARRING_MPI_ARGS})
else
  args+=(--mca btl self,vader --mca pml ob1)
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
exec mpirun "${args[@]}" "$@"
