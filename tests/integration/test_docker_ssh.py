#!/usr/bin/env python3
"""machine-docker with an ssh:// endpoint: a real sshd on 127.0.0.1 (the runs tests' fixture)
stands for the remote host, and the engine's socket is reached through OpenSSH's socket
forwarding with strict known_hosts checking. The full round trip — acquire, stage, a run,
release verified — goes through it; a host key that does not match refuses to start with the
reason, and nothing is learned on first use."""
import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, sh, structured, text_of  # noqa: E402


class _Host:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="rd-ssh-")
        self.sshd = None

    def close(self):
        if self.sshd is not None:
            try:
                os.killpg(self.sshd.pid, signal.SIGTERM)
            except OSError:
                pass
            self.sshd.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def ssh_host():
    if not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh"):
        skip("sshd or ssh is missing (openssh-server, openssh-client)")
    from runs_support import _start_sshd
    h = _Host()
    h.ssh = _start_sshd(h)
    return h


def test_ssh_endpoint(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        img = eng.image("minimal")
        h = ssh_host()
        try:
            s = h.ssh
            opts = {"endpoint": "ssh://%s@%s:%d" % (s["user"], s["host"], s["port"]),
                    "ssh": {"identityFile": s["identityFile"], "knownHostsFile": s["knownHostsFile"],
                            "remoteSocket": eng.socket}}
            state = tempfile.mkdtemp(prefix="rd-st-")  # short: the forwarded socket lives here
            try:
                with eng.relay(binary, {"minimal": img}, state_dir=state, extra_options=opts) as r:
                    r.initialize()
                    acq = acquire(r, "minimal")
                    g = acq["guest"]
                    assert eng.inspect(acq["vm"])["State"]["Running"] is True
                    st = r.call_tool("relay_stage", {"guest": g}, timeout=300)
                    assert st["isError"] is False, text_of(st)
                    assert sh(r, g, "echo over ssh; id -u") == "over ssh\n61000\n"
                    res = r.call_tool("relay_script", {"guest": g, "language": "shell", "inline": True,
                                                       "code": "echo recorded"}, timeout=120)
                    assert structured(res)["stdout"] == "recorded\n", text_of(res)
                    binding = [x for x in structured(r.call_tool("relay_status"))["guests"] if x["guest"] == g][0]
                    assert binding["binding"]["endpoint"] == opts["endpoint"], binding["binding"]
                    rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
                    assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
                    assert eng.inspect(acq["vm"]) is None
            finally:
                shutil.rmtree(state, ignore_errors=True)

            # A known_hosts file with another key: refused, with the reason, and not rewritten.
            bad = os.path.join(h.root, "other_known_hosts")
            other = os.path.join(h.root, "other_key")
            import subprocess
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
            with open(other + ".pub") as f, open(bad, "w") as out:
                out.write("[127.0.0.1]:%d %s\n" % (s["port"], " ".join(f.read().split()[:2])))
            before = open(bad).read()
            opts["ssh"]["knownHostsFile"] = bad
            state = tempfile.mkdtemp(prefix="rd-st-")
            try:
                with eng.relay(binary, {"minimal": img}, state_dir=state, extra_options=opts) as r:
                    r.initialize()
                    res = r.call_tool("relay_acquire", {"task": "x", "image": "minimal", "extractions": []},
                                      timeout=120)
                    assert res["isError"], text_of(res)
                    assert "ssh could not forward" in text_of(res) and bad in text_of(res), text_of(res)
                assert open(bad).read() == before, "the known_hosts file was changed"
            finally:
                shutil.rmtree(state, ignore_errors=True)
        finally:
            h.close()


if __name__ == "__main__":
    run_tests(globals())
