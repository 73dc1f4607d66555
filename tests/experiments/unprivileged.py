"""Runs a child process as a user who is not root, so that a test run as root (as CI runs the
suite) still sees what every other user sees: a folder without write permission refuses files
(root writes there anyway, so a permission case tested as root tests nothing).

    drop = unprivileged(self)        # skips the test where no such user can be had
    subprocess.run(argv, preexec_fn=drop, ...)

The paths the child needs (the repository's scripts, the test's folders) must be readable by
that user: `open_to_all(folder)` makes a test's temporary folder so."""
import os
import pwd
import subprocess
import sys


def unprivileged(test):
    """A preexec_fn that makes the child `nobody` when this process is root (None when it is not
    root: the child runs as this user). Skips `test` when `nobody` cannot run the interpreter on
    this repository (no such user, or the checkout is not readable by others)."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        test.skipTest("no user 'nobody' to drop root to")

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    here = os.path.abspath(__file__)
    probe = subprocess.run([sys.executable, "-c", f"open({here!r}).close()"], preexec_fn=drop,
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        test.skipTest("user 'nobody' cannot read this checkout")
    return drop


def open_to_all(folder):
    """`folder` (a test's mkdtemp, mode 0700) readable and enterable by every user."""
    os.chmod(folder, 0o755)
