#!/usr/bin/env bash
# The project's launch helper: `scripts/mpirun.sh -np N <program> [args...]`.
# Adds what Open MPI needs on this kind of machine so a user does not have to remember it:
#   --allow-run-as-root  when running as root;
#   --oversubscribe      (more ranks than cores time-share; harmless otherwise) unless the
#                        user asks Open MPI to refuse that: --nooversubscribe or a
#                        :NOOVERSUBSCRIBE mapping modifier, which conflict with it;
#   --bind-to none       so oversubscribed ranks are not pinned to the same core;
#   shared memory + self transports for single-host runs only: not when STARRING_MPI_ARGS is
#   set (it replaces them, e.g. STARRING_MPI_ARGS="--hostfile hosts"), nor when the command
#   line names hosts (--hostfile, -H, --rankfile, ...), OMPI_MCA_orte_default_hostfile is set or
#   it runs in a Slurm allocation of more than one node: they cannot reach another host (Open
#   MPI then picks the transport: UCX on InfiniBand/RoCE, else ob1 with TCP between hosts);
#   -x OPENBLAS_NUM_THREADS, so that ranks on other hosts get it too;
#   one short line instead of Open MPI's multi-line failure banners (see the end).
set -euo pipefail
user=()  # STARRING_MPI_ARGS, split into words (not glob-expanded: set -f)
if [ -n "${STARRING_MPI_ARGS:-}" ]; then
  set -f
  # shellcheck disable=SC2206
  user=(${STARRING_MPI_ARGS})
  set +f
fi
hosts=0      # the job may span hosts: the single-host transports would not reach them
oversub=1    # add --oversubscribe
for a in "${user[@]}" "$@"; do
  case "$a" in
    -H | --host | -host | --hostfile | -hostfile | --machinefile | -machinefile | \
      --default-hostfile | -default-hostfile | --rankfile | -rankfile | -rf | --hostfile=* | \
      --host=* | --rankfile=*) hosts=1 ;;
    --nooversubscribe | -nooversubscribe | *:NOOVERSUBSCRIBE* | *:nooversubscribe*) oversub=0 ;;
  esac
done
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
if [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -gt 1 ]; then hosts=1; fi
if [ -n "${OMPI_MCA_orte_default_hostfile:-}" ]; then hosts=1; fi
args=(--bind-to none -x OPENBLAS_NUM_THREADS)
if [ "$oversub" = 1 ]; then args=(--oversubscribe "${args[@]}"); fi
if [ "$(id -u)" -eq 0 ]; then args+=(--allow-run-as-root); fi
if [ "${#user[@]}" -gt 0 ]; then
  args+=("${user[@]}")
elif [ "$hosts" = 0 ]; then
  args+=(--mca btl "self,vader" --mca pml ob1)
fi
# Shared-memory transport settings, measured on this kind of machine (2-core VM, Open MPI 4.1.4):
#  - single-copy (CMA) works here but is slower than vader's copy-in/copy-out for both
#    MPI_Allreduce and point-to-point rings (16 MiB all-reduce, np 2: 5.5 vs 7.4 GB/s busbw),
#    so it stays off;
#  - 256 KiB fragments instead of 32 KiB speed up large point-to-point transfers a little
#    (quiet machine, np 2, busbw: MPI_Allreduce 4 MiB 14.1-14.4 -> 14.4-15.7 GB/s, 16 MiB
#    6.1-6.3 -> 6.3-6.6; the point-to-point ring 4 MiB 16.2-16.7 -> 17.4-19.1).
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_btl_vader_max_send_size=${OMPI_MCA_btl_vader_max_send_size:-262144}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# Open MPI's own failure banners (MPI_ABORT was invoked..., mpirun noticed that process rank...,
# Primary job terminated normally...) are condensed to one line by scripts/mpirun_filter.py,
# after the program's own error line; everything the ranks print passes unchanged. mpirun's
# --quiet is not used: it also hides which rank died of a signal and launch errors (a missing
# executable exits 132 without a word). STARRING_MPI_VERBOSE=1 shows mpirun's messages as is.
filter="$(dirname "$0")/mpirun_filter.py"
if [ "${STARRING_MPI_VERBOSE:-0}" = 1 ] || ! command -v python3 > /dev/null || [ ! -r "$filter" ]; then
  exec mpirun "${args[@]}" "$@"
fi
# mpirun stays this script's process (exec), so signals and exit codes are mpirun's own; the
# filter ignores SIGINT/SIGTERM/SIGUSR1 and ends when mpirun closes its stderr. It ignores them
# from its start (trap ''): until Python had started (0.15 s and more), a SIGUSR1 to the job's
# process group ended the filter and with it everything mpirun and the ranks wrote on stderr.
# $$ is this script's pid, which exec hands to mpirun: the filter tells mpirun's own crash
# backtrace from a rank's by it.
exec mpirun "${args[@]}" "$@" 2> >(trap '' INT TERM USR1; exec python3 "$filter" --launcher-pid $$ >&2)
