#!/usr/bin/env python3
"""`starring env` under scripts/mpirun.sh (what a user checks before a run): every rank's host
and the CPUs it may use, a warning when ranks outnumber the host's CPUs, the GPU each rank
would compute on and whether the nccl backend could run, and the variables that change
communication (NCCL_*, UCX_*, OMPI_MCA_btl/pml/coll/osc, ...), read on rank 0.
  test_env.py --bin build/bin/starring
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

import bin_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")
BIN = None  # set from --bin
# Each case is one or two short `env` jobs, read for what they print: five at once (bin_main.py).
OVERLAP = 5


def env(np_, extra_env=None, prefix=()):
    e = dict(os.environ)
    e.update(extra_env or {})
    p = subprocess.run(list(prefix) + [MPIRUN, "-np", str(np_), BIN, "env"], capture_output=True,
                       text=True, timeout=120, env=e)
    return p.returncode, p.stdout + p.stderr


def stopped_ranks(parent):
    """The pids of the stopped (state T) processes below `parent` (mpirun's ranks)."""
    found, todo = [], [parent]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            try:
                with open(f"/proc/{k}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        found.append(k)
            except OSError:
                pass
        todo += kids
    return found


class EnvCommand(unittest.TestCase):
    def test_a_slow_rank_0_is_waited_for_not_named(self):
        # Rank 0 alone queries the GPUs and prints (the CUDA driver's start-up takes seconds on a
        # host without persistence mode); the others waited for it in the end's agreement, which
        # at --timeout 0.5 named a healthy rank 0 after 11 s ("rank 0 did not finish within
        # 11 s", exit 1). Here rank 0 stops there (STARRING_TEST_STOP=env-report:0) and the test
        # lets it go on after 14 s: the job must end with the whole report, exit 0.
        e = dict(os.environ, STARRING_TEST_STOP="env-report:0")
        p = subprocess.Popen([MPIRUN, "-np", "2", BIN, "env", "--timeout", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        try:
            stopped, deadline = None, time.monotonic() + 60
            while stopped is None and time.monotonic() < deadline:
                time.sleep(0.2)
                stopped = next((pid for pid in stopped_ranks(p.pid)), None)
            self.assertIsNotNone(stopped, "rank 0 never stopped at env-report")
            time.sleep(14)
            self.assertIsNone(p.poll(), "the job ended while rank 0 was stopped")
            os.kill(stopped, signal.SIGCONT)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 0, out + err)
        self.assertNotIn("starring: error", err)
        self.assertIn("Environment (rank 0)", out)

    def test_ranks_cpus_and_oversubscription(self):
        cpus = len(os.sched_getaffinity(0))
        np_ = cpus + 1  # one more rank than this machine has CPUs
        rc, out = env(np_)
        self.assertEqual(rc, 0, out)
        self.assertIn(f"world size             {np_}", out)
        m = re.search(r"cpus per rank\s+(.*)", out)
        self.assertTrue(m, out)
        self.assertEqual([int(x.split(":")[0]) for x in m.group(1).split(", ")],
                         list(range(np_)), out)
        self.assertIn(f"oversubscribed       {np_} ranks on", out)

    def test_test_hosts_hook(self):
        # STARRING_TEST_HOSTS (common/test_hosts.h): ranks 0 and 2 on one test host, 1 on
        # another, each host listed with its ranks and GPU plan; the variable is shown, so that a
        # reader of the output knows the hosts are test hosts
        rc, out = env(3, {"STARRING_TEST_HOSTS": "0,1,0"})
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"host \S+~test-host-0 \(\d+ cpus\) +ranks 0,2\n")
        self.assertRegex(out, r"host \S+~test-host-1 \(\d+ cpus\) +ranks 1\n")
        self.assertRegex(out, r"~test-host-0: ranks 0->\S+ 2->")
        self.assertRegex(out.split("Environment (rank 0)")[1], r"STARRING_TEST_HOSTS\s+0,1,0")

    def test_test_hosts_hook_of_another_rank_count_is_refused(self):
        rc, out = env(2, {"STARRING_TEST_HOSTS": "0,1,0"})
        self.assertEqual(rc, 2, out)
        self.assertIn("STARRING_TEST_HOSTS=0,1,0 (a test hook, common/test_hosts.h) names a host "
                      "for 3 ranks; the job has 2", out)

    @unittest.skipUnless(shutil.which("taskset"), "needs taskset")
    def test_ranks_limited_to_fewer_cpus_than_the_host_has(self):
        # Two ranks that may both use only one CPU share it, however many the host has.
        cpu = min(os.sched_getaffinity(0))
        rc, out = env(2, prefix=("taskset", "-c", str(cpu)))
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, rf"cpus per rank\s+0: {cpu}, 1: {cpu}")
        self.assertIn("oversubscribed       2 ranks on 1 cpus", out)

    @unittest.skipUnless(shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2,
                         "needs taskset and 2 CPUs")
    def test_as_many_ranks_as_cpus_do_not_time_share(self):
        # 2 ranks allowed 2 CPUs have one each: 'oversubscribed' from ranks >= CPUs passed every
        # test (np 1 on this machine's CPUs and np CPUs + 1 are on either side of the edge)
        a, b = sorted(os.sched_getaffinity(0))[:2]
        rc, out = env(2, prefix=("taskset", "-c", f"{a},{b}"))
        self.assertEqual(rc, 0, out)
        both = f"{a}-{b}" if b == a + 1 else f"{a},{b}"
        self.assertRegex(out, rf"cpus per rank\s+0: {both}, 1: {both}\n")
        self.assertNotIn("oversubscribed", out)

    def test_gpu_of_every_rank_and_the_nccl_verdict(self):
        # The GPU --device cuda gives each rank (or cpu, with why), host by host, and whether
        # the nccl backend would get one GPU per rank; here: no usable GPU, or CUDA not built.
        rc, out = env(2)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"--device cuda\s+\S+: ranks 0->(cuda:\d+|cpu) 1->(cuda:\d+|cpu)")
        # train keeps dedicated ps servers on the CPU whatever --device says; env is not told
        # --servers, so it says so in a line of its own
        self.assertRegex(out, r"\n {2,}--backend ps --servers S: the last S ranks are servers, "
                              r"on the CPU\n")
        self.assertRegex(out, r"nccl backend\s+(not built|every rank has a GPU of its own|"
                              r"would refuse this job: it needs (a GPU on every rank, but rank 0|"
                              r"one GPU per rank, but ranks 0 and 1))")

    def test_a_process_started_without_mpirun_says_so(self):
        # `starring env` run by itself is an MPI singleton: "world size 1" read the same as
        # `mpirun -np 1`, with nothing to tell a user who forgot mpirun (and expected 4 ranks)
        e = {k: v for k, v in os.environ.items()
             if k not in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")}
        p = subprocess.run([BIN, "env"], capture_output=True, text=True, timeout=120, env=e)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("\n  world size             1  (started without mpirun: this process "
                      "alone)\n", p.stdout)
        rc, out = env(1)
        self.assertEqual(rc, 0, out)
        self.assertIn("\n  world size             1\n", out)

    def test_gpu_libraries_say_why_they_are_missing(self):
        # cuBLAS read "not available" in a build without CUDA, beside NCCL's "not built"; with
        # CUDA, the driver's row is the CUDA version it supports (nvidia-smi's "CUDA Version"),
        # not its own release number, and says so
        rc, out = env(1)
        self.assertEqual(rc, 0, out)
        built = re.search(r"\n  built +(yes|no)\n", out)
        self.assertTrue(built, out)
        if built.group(1) == "no":
            self.assertRegex(out, r"\n  cuBLAS +not built\n")
            self.assertRegex(out, r"\n  GPUs +none usable: built without CUDA\n")
            self.assertNotRegex(out, r"\n  (driver|runtime) ")
        else:
            self.assertRegex(out, r"\n  driver +(supports CUDA \d+\.\d+|none found)\n")
            self.assertRegex(out, r"\n  runtime +CUDA \d+\.\d+\n")
            self.assertRegex(out, r"\n  cuBLAS +(available|not available)\n")

    def test_openblas_threads_asked_beyond_the_cpus_say_why_fewer_run(self):
        # OPENBLAS_NUM_THREADS above the CPUs a rank may use: OpenBLAS runs one per CPU, and
        # env printed that count beside the variable's value without a word of why
        asked = len(os.sched_getaffinity(0)) + 1
        rc, out = env(1, {"OPENBLAS_NUM_THREADS": str(asked)})
        self.assertEqual(rc, 0, out)
        m = re.search(r"\n  threads now +(\d+)  \(train and bench set --threads 1\)\n +"
                      rf"OPENBLAS_NUM_THREADS={asked}: OpenBLAS caps it", out)
        self.assertTrue(m, out)
        self.assertLess(int(m.group(1)), asked)
        self.assertRegex(out.split("Environment (rank 0)")[1], rf"OPENBLAS_NUM_THREADS +{asked}\n")
        # what it asks for and gets: no note (the helper's OPENBLAS_NUM_THREADS=1)
        rc, out = env(1, {"OPENBLAS_NUM_THREADS": "1"})
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"\n  threads now +1  \(train and bench set --threads 1\)\n  config ")

    def test_every_backend_is_listed(self):
        # the backends --backend takes (nccl too where it is not built: it refuses at run time);
        # the registry's list losing one passed every test
        rc, out = env(1)
        self.assertEqual(rc, 0, out)
        m = re.search(r"\n  backends +(.*)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(sorted(m.group(1).split()),
                         ["local", "mpi", "nccl", "ps", "ring", "ring-p2p"])

    def test_the_commit_is_the_one_a_run_summary_records(self):
        # what a bug report needs first: `starring --version` was an unknown command, and env
        # did not say
        rc, out = env(1)
        self.assertEqual(rc, 0, out)
        m = re.search(r"\n  commit +(\S+)\n", out)
        self.assertTrue(m, out)
        # "+dirty": built from a tree whose tracked files differed from HEAD (cmake/git_commit.cmake)
        self.assertRegex(m.group(1), r"^([0-9a-f]{12}(\+dirty)?|unknown)$")
        p = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout), (0, f"starring {m.group(1)}\n"), p.stderr)

    def test_communication_variables_are_shown(self):
        # every family the help and README name: dropping UCX_ from the list passed every test
        # (scripts/mpirun.sh sets OMPI_MCA_btl and _pml itself)
        family = {"UCX_TLS": "sm,self", "OMPI_MCA_osc": "pt2pt", "CUDA_VISIBLE_DEVICES": "",
                  "OMP_NUM_THREADS": "1"}
        rc, out = env(1, {"NCCL_ALGO": "Ring", "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                          "OPENBLAS_L2_SIZE": "512", "UNRELATED_VARIABLE": "x", **family})
        self.assertEqual(rc, 0, out)
        section = out.split("Environment (rank 0)")[1]
        for name, value in family.items():
            self.assertRegex(section, rf"\n\s*{name}( +{re.escape(value)})?\s*\n", name)
        self.assertRegex(section, r"NCCL_ALGO\s+Ring")
        self.assertRegex(section, r"OMPI_MCA_coll_tuned_use_dynamic_rules\s+1")
        # OpenBLAS's blocking: the README promises OPENBLAS_*; only two of them were shown
        self.assertRegex(section, r"OPENBLAS_L2_SIZE\s+512")
        self.assertNotIn("UNRELATED_VARIABLE", section)
        self.assertNotIn("oversubscribed", out)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
