#!/usr/bin/env python3
"""scripts/mpirun.sh, the launch helper, with the options a cluster user gives it:
  test_mpirun_helper.py --bin build/bin/starring
- the mpirun command it assembles (a stand-in `mpirun` on PATH that writes its arguments): the
  single-host transports (`--mca btl self,vader`) only where the job cannot span hosts, the
  user's options untouched, no `--oversubscribe` where the user asks Open MPI to refuse it,
  OPENBLAS_NUM_THREADS passed to every host;
- the real mpirun: `--nooversubscribe` with a hostfile's slots, and a two-host job on this
  machine: Open MPI's ssh launch through a stand-in ssh that starts each "host"'s daemon here
  in a UTS namespace of its own (its own host name, so Open MPI and MPI_COMM_TYPE_SHARED take
  it for another node; transports between the two are then TCP) and with a clean environment,
  as ssh gives one. Needs root (unshare --uts); skipped otherwise.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

import bin_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")
BIN = None  # set from --bin

# What a Slurm allocation or the user's shell may have set that changes the helper's choices.
HOST_ENV = ("STARRING_MPI_ARGS", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
            "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_rmaps_base_mapping_policy",
            "STARRING_MPI_VERBOSE")


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items() if k not in HOST_ENV}
    e.update(extra)
    return e


def write_script(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class AssembledCommand(unittest.TestCase):
    """The helper's mpirun command line, read from a stand-in mpirun."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mpirun_helper_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.out = os.path.join(self.tmp, "argv")
        write_script(os.path.join(self.tmp, "mpirun"),
                     f'#!/bin/sh\nprintf "%s\\n" "$@" > {self.out}\n'
                     f'printf "OPENBLAS_NUM_THREADS=%s\\n" "$OPENBLAS_NUM_THREADS" >> {self.out}\n')

    def argv(self, *args, cwd=None, **env):
        e = clean_env(**env)
        e["PATH"] = self.tmp + os.pathsep + e.get("PATH", "")
        p = subprocess.run([MPIRUN, *args], capture_output=True, text=True, env=e, timeout=60,
                           cwd=cwd)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.out, encoding="utf-8") as f:
            return f.read().splitlines()

    def single_host_transport(self, argv):
        return "self,vader" in argv

    def test_one_host_gets_the_shared_memory_transports(self):
        argv = self.argv("-np", "2", "prog", "--flag")
        self.assertTrue(self.single_host_transport(argv), argv)
        self.assertIn("--oversubscribe", argv)
        self.assertEqual(argv[-3:-1], ["prog", "--flag"], argv)  # the program last, untouched
        # in a Slurm allocation of one node as well
        self.assertTrue(self.single_host_transport(self.argv("-np", "2", "prog",
                                                             SLURM_JOB_NUM_NODES="1")))

    def test_hosts_named_on_the_command_line_drop_them(self):
        # `scripts/mpirun.sh --hostfile hosts -np 16 ...` across two nodes failed in MPI_Init
        # ("unable to reach each other ... BTLs attempted: vader self"): the helper kept its
        # single-host transports unless STARRING_MPI_ARGS was set
        for opts in (["--hostfile", "hosts"], ["-hostfile", "hosts"], ["-H", "a:8,b:8"],
                     ["--host", "a,b"], ["--machinefile", "m"], ["--rankfile", "r"]):
            with self.subTest(opts=opts):
                argv = self.argv(*opts, "-np", "16", "prog")
                self.assertFalse(self.single_host_transport(argv), argv)
                self.assertEqual(argv[argv.index(opts[0]) + 1], opts[1], argv)

    def test_a_slurm_allocation_of_several_nodes_drops_them(self):
        # mpirun inside `salloc -N 2` takes the nodes from Slurm: no hostfile to see
        for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
            with self.subTest(var=var):
                argv = self.argv("-np", "16", "prog", **{var: "2"})
                self.assertFalse(self.single_host_transport(argv), argv)
        argv = self.argv("-np", "2", "prog", OMPI_MCA_orte_default_hostfile="/etc/hosts.mpi")
        self.assertFalse(self.single_host_transport(argv), argv)

    def test_starring_mpi_args_are_passed_as_words_unexpanded(self):
        open(os.path.join(self.tmp, "NCCL_x"), "w").close()  # a file the glob would match
        argv = self.argv("-np", "2", "prog", cwd=self.tmp,
                         STARRING_MPI_ARGS="--hostfile h --map-by ppr:8:node -x NCCL_*")
        i = argv.index("--hostfile")
        self.assertEqual(argv[i:i + 6], ["--hostfile", "h", "--map-by", "ppr:8:node", "-x",
                                         "NCCL_*"], argv)
        self.assertFalse(self.single_host_transport(argv), argv)

    def test_nooversubscribe_is_not_contradicted(self):
        # Open MPI 4.1 refuses --oversubscribe with either: "Conflicting directives for mapping
        # policy", so a user could not have the hostfile's slots enforced through the helper
        for opts, env in ((["--nooversubscribe"], {}), (["--map-by", "node:NOOVERSUBSCRIBE"], {}),
                          ([], {"STARRING_MPI_ARGS": "--hostfile h --nooversubscribe"})):
            with self.subTest(opts=opts, env=env):
                argv = self.argv(*opts, "-np", "2", "prog", **env)
                self.assertNotIn("--oversubscribe", argv)

    def test_the_programs_own_arguments_are_not_read_as_mpirun_options(self):
        # the helper read every word, the program's too: `/bin/echo run:nooversubscribe` at np 3
        # on 2 cores lost --oversubscribe ("not enough slots", exit 1), `prog --hostfile data`
        # lost the single-host transports
        for words in (["prog", "--hostfile", "data.txt"], ["prog", "-H"],
                      ["-x", "A", "--map-by", "slot", "--mca", "btl_tcp_if_include", "eth0",
                       "prog", "run:nooversubscribe", "--host=b"]):
            with self.subTest(words=words):
                argv = self.argv("-np", "3", *words)
                self.assertTrue(self.single_host_transport(argv), argv)
                self.assertIn("--oversubscribe", argv)
                self.assertEqual(argv[-1 - len(words):-1], words, argv)

    def test_every_mpirun_option_with_a_value_is_read_past(self):
        # options the scan did not know took a value ended it at their value: `-wd /run
        # --hostfile h` kept the single-host transports ("unable to reach each other")
        for opts in (["-wd", "/run"], ["--stdin", "none"], ["--ppr", "2:node"],
                     ["-cpus-per-rank", "2"], ["--report-pid", "-"], ["-cf", "carto"]):
            with self.subTest(opts=opts):
                argv = self.argv(*opts, "--hostfile", "h", "-np", "4", "prog")
                self.assertFalse(self.single_host_transport(argv), argv)

    def test_the_users_own_btl_or_pml_is_not_given_twice(self):
        # Open MPI refuses a parameter given twice ("MCA parameter has been listed multiple
        # times", exit 1): the README's transport advice (--mca btl self,vader,tcp) failed
        def mca(argv, name):
            return [argv[i + 2] for i in range(len(argv) - 2)
                    if argv[i] == "--mca" and argv[i + 1] == name]
        argv = self.argv("--mca", "btl", "tcp,self", "-np", "2", "prog")
        self.assertEqual((mca(argv, "btl"), mca(argv, "pml")), (["tcp,self"], ["ob1"]), argv)
        argv = self.argv("-np", "2", "prog", OMPI_MCA_pml="ucx")
        self.assertEqual((mca(argv, "btl"), mca(argv, "pml")), (["self,vader"], []), argv)

    def test_mca_settings_that_name_hosts_or_refuse_oversubscription(self):
        # a default hostfile or a NOOVERSUBSCRIBE policy given as an MCA setting (on the command
        # line, in the environment, in the user's mca-params.conf) spans hosts or conflicts with
        # --oversubscribe ("Conflicting directives for mapping policy", exit 1) as the options do
        argv = self.argv("-np", "2", "--mca", "orte_default_hostfile", "hosts", "prog")
        self.assertFalse(self.single_host_transport(argv), argv)
        argv = self.argv("-np", "2", "-mca", "rmaps_base_mapping_policy", "slot:NOOVERSUBSCRIBE",
                         "prog")
        self.assertNotIn("--oversubscribe", argv)
        self.assertTrue(self.single_host_transport(argv), argv)
        argv = self.argv("-np", "2", "prog",
                         OMPI_MCA_rmaps_base_mapping_policy="slot:NOOVERSUBSCRIBE")
        self.assertNotIn("--oversubscribe", argv)
        argv = self.argv("-np", "2", "prog",
                         STARRING_MPI_ARGS="--mca orte_default_hostfile hosts")
        self.assertFalse(self.single_host_transport(argv), argv)
        home = os.path.join(self.tmp, "home")
        os.makedirs(os.path.join(home, ".openmpi"))
        with open(os.path.join(home, ".openmpi", "mca-params.conf"), "w") as f:
            f.write("# site\norte_default_hostfile = /etc/hosts.mpi\n"
                    "rmaps_base_mapping_policy = node:NOOVERSUBSCRIBE\n")
        argv = self.argv("-np", "2", "prog", HOME=home)
        self.assertFalse(self.single_host_transport(argv), argv)
        self.assertNotIn("--oversubscribe", argv)

    def test_openblas_threads_reach_other_hosts(self):
        # mpirun passes OMPI_* variables to the ranks it starts on other hosts, others only with
        # -x: the helper's OPENBLAS_NUM_THREADS=1 stayed on mpirun's host
        argv = self.argv("-np", "2", "prog")
        self.assertIn("OPENBLAS_NUM_THREADS", argv[argv.index("-x") + 1:argv.index("-x") + 2])
        self.assertEqual(argv[-1], "OPENBLAS_NUM_THREADS=1")
        self.assertEqual(self.argv("-np", "2", "prog", OPENBLAS_NUM_THREADS="3")[-1],
                         "OPENBLAS_NUM_THREADS=3")


def run(args, env=None, timeout=120, cwd=None):
    p = subprocess.run([MPIRUN, *args], capture_output=True, text=True, timeout=timeout,
                       env=env or clean_env(), cwd=cwd)
    return p.returncode, p.stdout + p.stderr


class RealMpirun(unittest.TestCase):
    """The helper's options under Open MPI's own mpirun, on this machine."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mpirun_helper_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_nooversubscribe_enforces_the_hostfiles_slots(self):
        hosts = os.path.join(self.tmp, "hosts")
        with open(hosts, "w", encoding="utf-8") as f:
            f.write("localhost slots=2\n")
        rc, out = run(["--hostfile", hosts, "--nooversubscribe", "-np", "2", BIN, "env"])
        self.assertEqual(rc, 0, out)
        self.assertIn("world size             2", out)
        rc, out = run(["--hostfile", hosts, "--nooversubscribe", "-np", "3", BIN, "env"])
        self.assertNotEqual(rc, 0, out)
        self.assertIn("not enough slots", out)
        self.assertNotIn("Conflicting directives", out)

    def test_options_the_user_adds_are_accepted(self):
        # each failed before: "MCA parameter has been listed multiple times"; "Conflicting
        # directives for mapping policy" (the scan stopped at -wd's value, missed the modifier)
        for opts in (["--mca", "btl", "tcp,self"], ["-wd", self.tmp, "--map-by",
                                                    "core:NOOVERSUBSCRIBE"]):
            with self.subTest(opts=opts):
                rc, out = run([*opts, "-np", "1", BIN, "env"])
                self.assertEqual(rc, 0, out)


FAKE_SSH = """#!/bin/bash
# ssh as Open MPI's rsh launcher calls it (ssh [options] HOST COMMAND...): the command runs on
# this machine, in a UTS namespace named HOST, with a clean environment and a TMPDIR of its own
# (Open MPI's session directory is named after the host and user)
while [[ "$1" == -* ]]; do shift; done
host=$1; shift
exec env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \\
  unshare --uts bash -c "hostname $host && export TMPDIR=%(tmp)s/tmp_$host && \\
  mkdir -p \\$TMPDIR && $*"
"""


def can_fake_hosts():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("hostname"):
        return False
    return subprocess.run(["unshare", "--uts", "hostname", "starring-probe"],
                          capture_output=True).returncode == 0


@unittest.skipUnless(can_fake_hosts(), "needs root and unshare --uts (a host name per daemon)")
class TwoHosts(unittest.TestCase):
    """Two "hosts" of two slots each, given to the helper as a user would give real ones."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mpirun_two_hosts_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.ssh = os.path.join(self.tmp, "ssh")
        write_script(self.ssh, FAKE_SSH % {"tmp": self.tmp})
        self.hosts = os.path.join(self.tmp, "hosts")
        with open(self.hosts, "w", encoding="utf-8") as f:
            f.write("starring-node-a slots=2\nstarring-node-b slots=2\n")
        self.opts = ["--hostfile", self.hosts, "--mca", "plm_rsh_agent", self.ssh]

    def test_hostfile_given_to_the_helper_trains_across_hosts(self):
        # before: MPI_Init failed ("unable to reach each other ... BTLs attempted: vader self")
        summary = os.path.join(self.tmp, "s.json")
        rc, out = run(self.opts + ["-np", "4", BIN, "train", "--backend", "ps", "--servers", "1",
                                   "--dataset", "synthetic", "--max-steps", "10",
                                   "--summary-file", summary])
        self.assertEqual(rc, 0, out)
        with open(summary, encoding="utf-8") as f:
            ranks = json.load(f)["ranks"]
        self.assertEqual([r["host"] for r in ranks], ["starring-node-a"] * 2
                         + ["starring-node-b"] * 2)
        # the worker on the server's host pushes through shared memory, the other two in
        # messages (--ps-shared-memory is on by default; off between hosts by itself)
        server = ranks[0]["backend_stats"]["servers"][0]
        self.assertEqual(server["rank"], 3)
        self.assertGreater(server["shm_push_bytes"], 0, server)
        self.assertEqual(3 * server["shm_push_bytes"], server["push_bytes_in"], server)

    def test_variables_reach_the_ranks_on_other_hosts(self):
        # OPENBLAS_NUM_THREADS=1 (the helper's) and a -x of the user's
        e = clean_env(NCCL_DEBUG="WARN", STARRING_MPI_ARGS=" ".join(self.opts + ["-x",
                                                                              "NCCL_DEBUG"]))
        e.pop("OPENBLAS_NUM_THREADS", None)
        rc, out = run(["-np", "2", BIN, "env"], env=e)
        self.assertEqual(rc, 0, out)
        self.assertIn("host starring-node-a", out)
        self.assertRegex(out, r"threads now +1 ")
        self.assertRegex(out.split("Environment (rank 0)")[1], r"NCCL_DEBUG +WARN")


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
