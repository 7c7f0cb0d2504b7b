"""Running an integration test as an ordinary user (issue 21: agent hosts run as their user,
never as root). A test file calls as_ordinary_user(__file__) first: run by root, it runs itself
again as the ordinary user `relayci` (RELAY_TEST_USER overrides) through runuser and exits
with that run's status; run by an ordinary user, it returns and the tests run as that user."""
import os
import pwd
import shutil
import subprocess
import sys

from relay_client import Skip

DEFAULT_USER = "relayci"


def test_user():
    return os.environ.get("RELAY_TEST_USER", DEFAULT_USER)


def _why_not(user):
    if not shutil.which("runuser"):
        return "runuser is missing (util-linux): cannot run the test as an ordinary user"
    try:
        pwd.getpwnam(user)
    except KeyError:
        return "the ordinary user %s does not exist (useradd -m %s, with a range in /etc/subuid)" % (user, user)
    return None


def run_as(user, argv, env_extra=None, timeout=900, prefix=None):
    """Runs argv as `user` (root only); returns the CompletedProcess (text). `prefix`: a
    command root runs first that execs the rest (e.g. nsenter into a network namespace)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("RELAY_", "MCP_RELAY_", "PYTHON"))}
    env.update(env_extra or {})
    env["PATH"] = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    cmd = list(prefix or []) + ["runuser", "-u", user, "--", "env", "-i"] + \
        ["%s=%s" % kv for kv in sorted(env.items())] + list(argv)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          cwd="/")


def python_for_all():
    """A python3 every user can run (root's own may live in a private folder)."""
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(p, os.X_OK):
            return p
    return sys.executable


def tun_for_users():
    """Root only: makes /dev/net/tun openable by users (0666, the kernel's default mode; this
    project's containers make it 0600) for the user-mode network helpers. Returns the mode to
    restore (None when nothing changed)."""
    try:
        mode = os.stat("/dev/net/tun").st_mode & 0o7777
    except OSError:
        return None
    if mode == 0o666:
        return None
    os.chmod("/dev/net/tun", 0o666)
    return mode


def as_ordinary_user(script, user=None, prefix=None, env_extra=None):
    """Root: reruns `script` (with this process's arguments) as the ordinary user and exits
    (`prefix` and `env_extra` as for run_as). An ordinary user: returns. Prints SKIP lines
    (exit 0) when no such user can be used."""
    if os.geteuid() != 0:
        return
    user = user or test_user()
    why = _why_not(user)
    if why:
        print("SKIP all: %s" % why, flush=True)
        print("0 failed", flush=True)
        sys.exit(0)
    restore = tun_for_users()
    try:
        res = run_as(user, [python_for_all(), os.path.abspath(script)] + sys.argv[1:], env_extra=env_extra,
                     prefix=prefix)
    finally:
        if restore is not None:
            os.chmod("/dev/net/tun", restore)
    sys.stdout.write(res.stdout)
    sys.stdout.flush()
    sys.exit(res.returncode)


def require_ordinary():
    if os.geteuid() == 0:
        raise Skip("this test runs as an ordinary user only")
