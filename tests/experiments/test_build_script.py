#!/usr/bin/env python3
"""scripts/build.sh with a stand-in `cmake` on PATH that records its arguments: `--target T`
goes to the build step (so scripts/quickstart.sh can build only the `starring` executable, not
the test binaries), every other argument to the configure step; and scripts/quickstart.sh's
arguments, refused before any work when unknown; scripts/setup.sh's message to a user who
lacks a package and cannot install it, and the commands it runs through sudo for one who can."""
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

from unprivileged import open_to_all, unprivileged

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD_SH = os.path.join(REPO, "scripts", "build.sh")
QUICKSTART = os.path.join(REPO, "scripts", "quickstart.sh")
SETUP = os.path.join(REPO, "scripts", "setup.sh")

FAKE_CMAKE = """#!/bin/sh
printf '%s\\n' "$*" >> "$CMAKE_CALLS"
"""


def run_build(*args):
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "cmake")
        with open(fake, "w") as f:
            f.write(FAKE_CMAKE)
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
        calls = os.path.join(tmp, "calls")
        env = dict(os.environ, PATH=tmp + os.pathsep + os.environ["PATH"], CMAKE_CALLS=calls,
                   STARRING_BUILD_DIR=os.path.join(tmp, "build"))
        p = subprocess.run(["bash", BUILD_SH, *args], env=env, capture_output=True, text=True)
        lines = open(calls).read().splitlines() if os.path.exists(calls) else []
        return p, lines


class BuildScript(unittest.TestCase):
    def test_target_goes_to_the_build_step(self):
        p, calls = run_build("--target", "starring", "-DSTARRING_CUDA=OFF")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(calls), 2, calls)
        configure, build = calls
        self.assertIn("-DSTARRING_CUDA=OFF", configure)
        self.assertNotIn("--target", configure)
        self.assertTrue(build.startswith("--build "), build)
        self.assertTrue(build.endswith("--target starring"), build)

    def test_several_targets_and_the_equals_form(self):
        p, calls = run_build("--target=starring", "--target", "test_ring")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(calls[1].endswith("--target starring --target test_ring"), calls[1])

    def test_no_target_builds_everything(self):
        p, calls = run_build()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("--target", calls[1])

    def test_target_without_a_name_is_an_error(self):
        p, calls = run_build("--target")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--target needs a target name", p.stderr)
        self.assertEqual(calls, [])

    def test_help_prints_the_usage_and_builds_nothing(self):
        # `build.sh --help` went to cmake's configure step as an extra argument (cmake printed
        # its own help into /dev/null) and then built everything: minutes, as quickstart.sh and
        # test.sh --help did before they were fixed
        for flag in ("--help", "-h"):
            p, calls = run_build(flag)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("scripts/build.sh [--target T ...] [extra cmake args...]", p.stdout)
            self.assertEqual(calls, [], flag)
            # the whole header, each sentence whole: the line naming STARRING_BUILD_DIR once
            # replaced the start of the CUDA sentence ('toolkit is found' opened a line)
            self.assertIn("CUDA/cuBLAS/NCCL are built when the toolkit is found", " ".join(
                p.stdout.split()))
            self.assertTrue(p.stdout.splitlines()[0].startswith("Configures and builds"))
            self.assertNotIn("set -e", p.stdout)


class QuickstartArguments(unittest.TestCase):
    # `quickstart.sh --help` (or --quick, a sweep's flag) took every argument but --out
    # silently and ran the whole main job: minutes of build and sweeps
    def run_quickstart(self, *args):
        return subprocess.run(["bash", QUICKSTART, *args], capture_output=True, text=True,
                              timeout=30)

    def test_unknown_argument_is_refused_before_any_work(self):
        for args in (["--quick"], ["--out"], ["--out", "x", "extra"]):
            p = self.run_quickstart(*args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn("[quickstart] error:", p.stderr)
            self.assertIn("usage: scripts/quickstart.sh [--out DIR]", p.stderr)
            self.assertNotIn("[setup]", p.stdout + p.stderr)

    def test_help(self):
        p = self.run_quickstart("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("usage: scripts/quickstart.sh [--out DIR]", p.stdout)
        # scripts/test.sh --help: its usage, not a full build followed by ctest's help
        p = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh"), "--help"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("scripts/test.sh --sanitize address|thread [ctest args...]", p.stdout)
        self.assertNotIn("[setup]", p.stdout + p.stderr)


STUB_SH = """#!/bin/sh
echo "$(basename "$0") $*" >> "$(dirname "$0")/calls"
"""
STUB_REPORT = """import os, sys
with open(os.path.join(os.path.dirname(__file__), "calls"), "a") as f:
    f.write("report.py " + " ".join(sys.argv[1:]) + "\\n")
sys.exit(int(os.environ.get("STUB_REPORT_RC", "0")))
"""


class QuickstartResultsFolder(unittest.TestCase):
    # As a user, `quickstart.sh --out DIR` where the user cannot write DIR ran the set-up and the
    # build (minutes on a fresh clone), three sweeps that each refused the folder, report.py ('no
    # such folder'), and ended '[quickstart] done in 24 s; open DIR/report/report.html'. Here
    # quickstart.sh runs from a copy of scripts/ whose setup.sh, build.sh, sweep.sh and
    # report.py only log their calls.
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="starring_quickstart_test_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        open_to_all(self.tmp)
        self.scripts = os.path.join(self.tmp, "scripts")
        os.mkdir(self.scripts, 0o777)
        os.chmod(self.scripts, 0o777)  # the stubs' log, written by whoever runs them
        shutil.copy(QUICKSTART, self.scripts)
        for name, body in [("setup.sh", STUB_SH), ("build.sh", STUB_SH), ("sweep.sh", STUB_SH),
                           ("report.py", STUB_REPORT)]:
            with open(os.path.join(self.scripts, name), "w") as f:
                f.write(body)
            os.chmod(os.path.join(self.scripts, name), 0o755)

    def run_quickstart(self, out, drop=None, **env):
        p = subprocess.run(["bash", os.path.join(self.scripts, "quickstart.sh"), "--out", out],
                           capture_output=True, text=True, timeout=30, preexec_fn=drop,
                           env=dict(os.environ, **env))
        log = os.path.join(self.scripts, "calls")
        calls = []
        if os.path.exists(log):
            with open(log) as f:
                calls = [c.split()[0] for c in f.read().splitlines()]
        return p, calls

    def assert_refused(self, p, calls, says):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("[quickstart] error: cannot write the results to"),
                        lines)
        self.assertIn(says, lines[0])
        self.assertEqual(calls, [])  # before the set-up, the build and the sweeps

    def test_a_folder_that_cannot_take_the_results_is_refused_before_any_work(self):
        plain = os.path.join(self.tmp, "a-file")
        open(plain, "w").close()
        p, calls = self.run_quickstart(os.path.join(plain, "res"))
        self.assert_refused(p, calls, f"'{plain}' is not a folder")

    def test_a_folder_this_user_cannot_write_is_refused_before_any_work(self):
        drop = unprivileged(self)
        ro = os.path.join(self.tmp, "ro")
        os.makedirs(os.path.join(ro, "earlier"))
        os.chmod(ro, 0o555)
        # DIR to be made in it, and an earlier DIR there that could not be moved aside (that mv
        # failed in an && list, which set -e lets pass, and the run went on)
        for out in (os.path.join(ro, "res", "main"), os.path.join(ro, "earlier")):
            p, calls = self.run_quickstart(out, drop)
            self.assert_refused(p, calls, f"'{ro}' is a folder this user")

    def test_no_report_no_page_to_open(self):
        out = os.path.join(self.tmp, "res")
        p, calls = self.run_quickstart(out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(calls, ["setup.sh", "build.sh", "sweep.sh", "sweep.sh", "sweep.sh",
                                 "report.py"])
        self.assertIn(f"open {out}/report/report.html", p.stdout)
        p, calls = self.run_quickstart(out, STUB_REPORT_RC="1")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("open ", p.stdout + p.stderr)
        self.assertIn("no report was written", p.stderr)


def run_setup(tmp, extra_stubs, *args, absent=("dataset-fashion-mnist",)):
    """scripts/setup.sh as a normal user (`id -u` says 1000) lacking the packages `absent`, with
    only the stubs in `tmp` (and grep) on PATH; a stub given as None is left out (apt-get's
    logs its calls: it is on a user's PATH, and sudo or root runs it)."""
    stubs = {"dpkg-query": 'for p; do :; done  # the package: the last argument\n'
                           f'case " {" ".join(absent)} " in *" $p "*) exit 1;; esac\n'
                           'echo "install ok installed"\n',
             "id": "echo 1000\n", "apt-get": 'echo "$*" >> "${0%/*}/apt_calls"\n',
             **extra_stubs}
    for name, body in stubs.items():
        if body is None:
            continue
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
    os.symlink(shutil.which("grep"), os.path.join(tmp, "grep"))
    return subprocess.run(["/bin/bash", SETUP, *args], env={"PATH": tmp}, capture_output=True,
                          text=True, timeout=30)


class SetupWithoutRoot(unittest.TestCase):
    # A user who is not root, has no sudo, and lacks a package read only "[setup] error: missing
    # packages (dataset-fashion-mnist) and not root, no sudo": not what to do about it.
    def test_a_missing_package_without_root_or_sudo_says_what_to_do(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {})  # PATH holds no sudo
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("missing packages: dataset-fashion-mnist", p.stderr)
        self.assertIn("needs root", p.stderr)
        self.assertIn("'apt-get install dataset-fashion-mnist'", p.stderr)


    # A machine whose administrator installed every package but the optional SimGrid one:
    # setup.sh stopped every user without sudo ('missing packages: libsimgrid-dev ... needs
    # root'), and with it both of the README's commands, though only the SimGrid bench needs it
    # (its test reports Skipped without).
    def test_only_an_optional_package_missing_goes_on(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {}, absent=("libsimgrid-dev",))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("optional libsimgrid-dev is not installed", p.stdout)
        self.assertIn("report Skipped", p.stdout)

    def test_the_administrators_command_names_the_optional_package_too(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {}, absent=("zlib1g-dev", "libsimgrid-dev"))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("missing packages: zlib1g-dev.", p.stderr)
        self.assertIn("'apt-get install zlib1g-dev libsimgrid-dev'", p.stderr)


# What a machine that is not Debian/Ubuntu has on PATH: the build's commands, no dpkg-query.
NOT_DEBIAN = {"dpkg-query": None, **{c: "exit 0\n" for c in
                                     ("cmake", "make", "c++", "mpicxx", "mpirun", "python3")}}
DATA = "/usr/share/datasets/fashion-mnist"


class SetupWithoutApt(unittest.TestCase):
    # Without dpkg-query every package counted as missing: a user read 'missing packages:' and
    # the whole Debian list, and root ran 'env: apt-get: No such file or directory' after
    # '[setup] installing: ...' (exit 127). Both README commands stopped there, even where
    # everything the build needs was installed by the system's own package manager.
    def test_not_debian_lacking_a_command_names_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {**NOT_DEBIAN, "mpicxx": None, "id": "echo 0\n"})
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("not a Debian/Ubuntu machine (no dpkg-query)", lines[0])
        self.assertIn("it lacks: mpicxx.", lines[0])
        self.assertNotIn("installing", p.stdout)

    def test_not_debian_lacking_matplotlib_names_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {**NOT_DEBIAN, "python3": "exit 1\n"})
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("it lacks: python3's matplotlib.", p.stderr)

    def test_not_debian_with_everything_goes_on_to_the_build(self):
        if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
            self.skipTest(f"no Fashion-MNIST in {DATA}")
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, NOT_DEBIAN)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("not a Debian/Ubuntu machine", p.stdout)
        self.assertIn("the build's CMake step checks the libraries", p.stdout)

    def test_dpkg_without_apt_get_says_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {"id": "echo 0\n", "apt-get": None})  # root, no apt-get
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("missing packages: dataset-fashion-mnist, and this machine has no apt-get",
                      p.stderr)
        self.assertNotIn("installing", p.stdout)


class SetupArguments(unittest.TestCase):
    # setup.sh read no arguments: `setup.sh --help` went straight to checking the packages and,
    # as root or with sudo, to apt-get install
    def run_setup_with_sudo(self, *args):
        """setup.sh ARGS with a stand-in sudo that records its calls; fails if one was made."""
        with tempfile.TemporaryDirectory() as tmp:
            sudo = 'printf "%s\\n" "$*" >> "${0%/*}/sudo_calls"\n'
            p = run_setup(tmp, {"sudo": sudo}, *args)
            self.assertFalse(os.path.exists(os.path.join(tmp, "sudo_calls")))
        return p

    def test_help_prints_what_it_does_and_installs_nothing(self):
        p = self.run_setup_with_sudo("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Installs what a fresh Debian 12", p.stdout)
        self.assertNotIn("[setup]", p.stdout + p.stderr)

    def test_unknown_argument_is_refused(self):
        p = self.run_setup_with_sudo("--yes")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("unknown argument '--yes'", p.stderr)


class SetupWithSudo(unittest.TestCase):
    # The script exported DEBIAN_FRONTEND=noninteractive and ran `sudo apt-get ...`: sudo's
    # default env_reset (Debian's sudoers: `Defaults env_reset`, no env_keep for it) drops the
    # variable, so apt-get ran with debconf's interactive frontend. The stand-in sudo below keeps
    # nothing of the caller's environment either: only its arguments reach apt-get.
    SUDO = 'printf "%s\\n" "$*" >> "${0%/*}/sudo_calls"\nexit ${SUDO_RC:-0}\n'

    def test_apt_get_runs_through_sudo_noninteractive(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {"sudo": self.SUDO})
            calls = open(os.path.join(tmp, "sudo_calls")).read().splitlines()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(calls, [
            "env DEBIAN_FRONTEND=noninteractive apt-get update -q",
            "env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
            "dataset-fashion-mnist"])
        self.assertIn("[setup] installing: dataset-fashion-mnist", p.stdout)

    def test_as_root_apt_get_runs_directly_noninteractive(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(shutil.which("env"), os.path.join(tmp, "env"))
            p = run_setup(tmp, {"id": "echo 0\n", "apt-get":
                                'echo "$DEBIAN_FRONTEND $*" >> "${0%/*}/apt_calls"\n'})
            calls = open(os.path.join(tmp, "apt_calls")).read().splitlines()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(calls, [
            "noninteractive update -q",
            "noninteractive install -y -q --no-install-recommends dataset-fashion-mnist"])

    def test_an_optional_package_apt_cannot_install_is_a_note(self):
        # an Ubuntu without the universe component has no libsimgrid-dev: 'apt-get install' of
        # it with the required packages failed them all
        apt = 'echo "$*" >> "${0%/*}/apt_calls"\ncase "$*" in *libsimgrid-dev*) exit 100;; esac\n'
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(shutil.which("env"), os.path.join(tmp, "env"))
            p = run_setup(tmp, {"id": "echo 0\n", "apt-get": apt},
                          absent=("zlib1g-dev", "libsimgrid-dev"))
            calls = open(os.path.join(tmp, "apt_calls")).read().splitlines()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(calls, ["update -q",
                                 "install -y -q --no-install-recommends zlib1g-dev",
                                 "install -y -q --no-install-recommends libsimgrid-dev"])
        self.assertIn("optional libsimgrid-dev could not be installed", p.stdout)
        self.assertIn("[setup] done", p.stdout)

    def test_a_refused_sudo_stops_the_script(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = run_setup(tmp, {"sudo": "SUDO_RC=1\n" + self.SUDO})
            calls = open(os.path.join(tmp, "sudo_calls")).read().splitlines()
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(len(calls), 1, calls)  # apt-get update, then nothing
        self.assertNotIn("[setup] done", p.stdout)


if __name__ == "__main__":
    unittest.main()
