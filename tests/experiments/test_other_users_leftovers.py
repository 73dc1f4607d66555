#!/usr/bin/env python3
"""The single-process test binaries that write files (test_idx, test_config, test_trace) as a
user other than the one whose runs left folders in the temp folder.

Their folders were named after the process id alone (/tmp/starring_idx_<pid>,
/tmp/starring_cfg_<pid>, /tmp/starring_sources_<pid>, /tmp/starring_trace_test_<pid>_<test>):
one that a failed or killed run of another user left behind (13 such trace folders and a
sources file of root's were in /tmp on 2026-12-02) stood in the way of any later test process
that got the same pid (pid_max is 32768 here: pids come round within one suite run), which then
failed for a reason that was not its own. Here each binary runs as `nobody` in a new PID
namespace, where its pid is small and known, after root has left such entries for every pid it
could get.

    test_other_users_leftovers.py --bin test_idx=PATH --bin test_config=PATH ...
"""
import argparse
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import unittest

BINS = {}
PIDS = range(1, 33)  # a new PID namespace's first pids: the shell, then the binary


def names_for(pid, tests):
    """The entries another user's runs left with this pid: folders, and the config sources'
    file."""
    dirs = [f"starring_idx_{pid}", f"starring_cfg_{pid}"]
    dirs += [f"starring_trace_test_{pid}_{t}" for t in tests]
    return dirs, [f"starring_sources_{pid}"]


class OtherUsersLeftovers(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root: to leave entries of another user and start a PID namespace")
        try:
            self.nobody = pwd.getpwnam("nobody")
        except KeyError:
            self.skipTest("no user 'nobody'")
        if not shutil.which("unshare") or not shutil.which("setpriv"):
            self.skipTest("no unshare/setpriv (util-linux)")
        self.tmp = tempfile.mkdtemp(prefix="starring_leftovers_test_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        os.chmod(self.tmp, 0o1777)  # as /tmp: every user writes, none removes another's

    def run_as_nobody(self, argv):
        """argv as nobody, in a new PID namespace (so with a pid from PIDS), TMPDIR the test's
        temp folder."""
        cmd = ["unshare", "--pid", "--fork", "--kill-child", "setpriv",
               f"--reuid={self.nobody.pw_uid}", f"--regid={self.nobody.pw_gid}",
               "--clear-groups", "sh", "-c", '"$@"; exit $?', "sh", *argv]
        env = dict(os.environ, TMPDIR=self.tmp, HOME=self.tmp)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)

    def test_leftovers_of_another_user_do_not_fail_the_tests(self):
        for name, path in BINS.items():
            with self.subTest(binary=name):
                listing = self.run_as_nobody([path, "--gtest_list_tests"])
                if listing.returncode != 0:
                    self.skipTest(f"nobody cannot run {path}: {listing.stderr.strip()[:200]}")
                tests = [line.strip() for line in listing.stdout.splitlines()
                         if line.startswith("  ")]
                for pid in PIDS:
                    dirs, files = names_for(pid, tests)
                    for d in dirs:
                        os.makedirs(os.path.join(self.tmp, d, "old"), exist_ok=True)
                        os.chmod(os.path.join(self.tmp, d), 0o755)  # root's, as a run leaves it
                    for f in files:
                        with open(os.path.join(self.tmp, f), "w") as out:
                            out.write("[old]\n")
                p = self.run_as_nobody([path])
                self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-3000:])
                self.assertIn("[  PASSED  ]", p.stdout)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH of a test binary")
    args, rest = ap.parse_known_args()
    for b in args.bin:
        name, _, path = b.partition("=")
        BINS[name] = path
    unittest.main(argv=[sys.argv[0], *rest])
