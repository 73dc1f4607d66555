#!/usr/bin/env bash
# The project's launch helper: `scripts/mpirun.sh -np N <program> [args...]`.
# Adds what Open MPI needs on this kind of machine so a user does not have to remember it:
#   --allow-run-as-root  when running as root;
#   --oversubscribe      (more ranks than cores time-share; harmless otherwise) unless the
#                        user asks Open MPI to refuse that: --nooversubscribe or a
#                        :NOOVERSUBSCRIBE mapping modifier, which conflict with it;
#   --bind-to none       so oversubscribed ranks are not pinned to the same core;
#   shared memory + self transports (--mca btl self,vader, --mca pml ob1; each left to the user
#   who sets it: --mca btl/pml, OMPI_MCA_btl/pml) for single-host runs only: not when STARRING_MPI_ARGS is
#   set (it replaces them, e.g. STARRING_MPI_ARGS="--hostfile hosts"), nor when the command
#   line's mpirun options (those before the program) name hosts (--hostfile, -H, --rankfile,
#   --mca orte_default_hostfile ...), OMPI_MCA_orte_default_hostfile or Open MPI's MCA parameter
#   files name a default hostfile, or it runs in a Slurm allocation of more than one node: they
#   cannot reach another host (Open
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
own_btl=1    # add --mca btl self,vader (single host) unless the user names the BTLs
own_pml=1    # the same for --mca pml ob1
# note WORD: what an mpirun option (or an MCA setting "NAME VALUE") says about hosts and
# oversubscription
note() {
  case "$1" in
    -H | --host | -host | --hostfile | -hostfile | --machinefile | -machinefile | \
      --default-hostfile | -default-hostfile | --rankfile | -rankfile | -rf | --hostfile=* | \
      --host=* | --rankfile=* | "orte_default_hostfile "*) hosts=1 ;;
    --nooversubscribe | -nooversubscribe | *:NOOVERSUBSCRIBE* | *:nooversubscribe*) oversub=0 ;;
    "btl "*) own_btl=0 ;;  # the user's own transports: Open MPI refuses a parameter given twice
    "pml "*) own_pml=0 ;;
  esac
}
# STARRING_MPI_ARGS holds mpirun options only; the command line's end at the program (the first
# word that is not an option or an option's value): its own arguments are not mpirun's, whatever
# they look like (`prog --hostfile data.txt`, `/bin/echo run:nooversubscribe`)
words=(${user[@]+"${user[@]}"})
for ((i = 1; i <= $#; i++)); do
  a=${!i}
  case "$a" in
    # every option of Open MPI 4.1's `mpirun --help all` that takes a value (one missed here
    # ended the scan: `-wd /run --hostfile h` kept the single-host transports)
    -np | --np | -n | --n | -c | -N | --npernode | -npernode | --npersocket | -npersocket | \
      --map-by | -map-by | --rank-by | -rank-by | --bind-to | -bind-to | --ppr | -ppr | -x | \
      --wdir | -wdir | --wd | -wd | --path | -path | --prefix | -prefix | --output-filename | \
      -output-filename | --timeout | -timeout | --cpu-set | -cpu-set | --cpu-list | -cpu-list | \
      --cpus-per-proc | -cpus-per-proc | --cpus-per-rank | -cpus-per-rank | --am | -am | \
      --tune | -tune | --preload-files | -preload-files | --output | -output | --app | -app | \
      --stdin | -stdin | --cartofile | -cf | --debugger | -debugger | --launch-agent | \
      -launch-agent | --personality | -personality | --xterm | -xterm | --hnp | -hnp | \
      --ompi-server | -ompi-server | --max-vm-size | -max-vm-size | --max-restarts | \
      -max-restarts | --xml-file | -xml-file | --report-uri | -report-uri | --report-pid | \
      -report-pid | --report-events | -report-events | \
      -H | --host | -host | --hostfile | -hostfile | --machinefile | -machinefile | \
      --default-hostfile | -default-hostfile | --rankfile | -rankfile | -rf)
      words+=("$a")
      i=$((i + 1))
      if [ "$i" -le $# ]; then words+=("${!i}"); fi ;;
    --mca | -mca | --gmca | -gmca)  # two words: the name and the value
      if [ $((i + 2)) -le $# ]; then
        n=$((i + 1)) v=$((i + 2))
        words+=("${!n} ${!v}")
      fi
      i=$((i + 2)) ;;
    -*) words+=("$a") ;;
    *) break ;;
  esac
done
for ((k = 0; k < ${#user[@]}; k++)); do  # STARRING_MPI_ARGS's --mca NAME VALUE
  case "${user[k]}" in
    --mca | -mca | --gmca | -gmca) words+=("${user[k + 1]:-} ${user[k + 2]:-}") ;;
  esac
done
for a in ${words[@]+"${words[@]}"}; do note "$a"; done
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
if [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -gt 1 ]; then hosts=1; fi
if [ -n "${OMPI_MCA_orte_default_hostfile:-}" ]; then hosts=1; fi
if [ -n "${OMPI_MCA_btl:-}" ]; then own_btl=0; fi  # a command-line setting would override them
if [ -n "${OMPI_MCA_pml:-}" ]; then own_pml=0; fi
note "${OMPI_MCA_rmaps_base_mapping_policy:-}"
# Open MPI's MCA parameter files: the site's and the user's (a default hostfile named there
# makes every job span its hosts; a NOOVERSUBSCRIBE policy there conflicts with --oversubscribe)
for f in /etc/openmpi/openmpi-mca-params.conf "${HOME:-/nonexistent}/.openmpi/mca-params.conf"; do
  if [ -r "$f" ]; then
    if grep -Eq '^[[:space:]]*orte_default_hostfile[[:space:]]*=' "$f"; then hosts=1; fi
    if grep -Eiq '^[[:space:]]*rmaps_base_mapping_policy[[:space:]]*=.*:nooversubscribe' "$f"; then
      oversub=0
    fi
  fi
done
args=(--bind-to none -x OPENBLAS_NUM_THREADS)
if [ "$oversub" = 1 ]; then args=(--oversubscribe "${args[@]}"); fi
if [ "$(id -u)" -eq 0 ]; then args+=(--allow-run-as-root); fi
if [ "${#user[@]}" -gt 0 ]; then
  args+=(${user[@]+"${user[@]}"})
elif [ "$hosts" = 0 ]; then
  if [ "$own_btl" = 1 ]; then args+=(--mca btl "self,vader"); fi
  if [ "$own_pml" = 1 ]; then args+=(--mca pml ob1); fi
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
