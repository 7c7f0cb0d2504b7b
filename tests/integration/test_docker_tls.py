#!/usr/bin/env python3
"""machine-docker over tcp:// with TLS client certificates, against a real dockerd listening on
loopback with --tlsverify (docker_support.py) and certificates this test makes with openssl: a
guest is acquired, staged, runs a script (the exec stream hijacked over TLS) and is released;
plain tcp:// is refused with its reason before anything is sent; a client certificate the
engine's CA did not sign, or an engine certificate our CA did not sign, is refused by the TLS
handshake and doctor says the endpoint cannot be reached."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, doctor, doctor_line, dockerd_missing, plugin_missing, sh  # noqa: E402


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + "-key.pem", "-out", name + ".pem",
            "-days", "1", "-subj", "/CN=%s" % name, cwd=d)


def make_cert(d, ca, name, usage, san=None):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + "-key.pem", "-out", name + ".csr",
            "-subj", "/CN=%s" % name, cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("extendedKeyUsage=%s\n" % usage + ("subjectAltName=%s\n" % san if san else ""))
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + "-key.pem", "-CAcreateserial",
            "-out", name + "-cert.pem", "-days", "1", "-extfile", name + ".ext", cwd=d)
    os.chmod(os.path.join(d, name + "-key.pem"), 0o600)


def certificates():
    d = tempfile.mkdtemp(prefix="relay-docker-tls-")
    make_ca(d, "ca")
    make_cert(d, "ca", "server", "serverAuth", "IP:127.0.0.1")
    make_cert(d, "ca", "client", "clientAuth")
    make_ca(d, "other")  # a CA the engine does not know
    make_cert(d, "other", "rogue", "clientAuth")
    return d


def tls_options(d, eng, client="client", ca="ca"):
    return {"endpoint": "tcp://127.0.0.1:%d" % eng.tcp_port,
            "tls": {"caFile": os.path.join(d, ca + ".pem"), "certFile": os.path.join(d, client + "-cert.pem"),
                    "keyFile": os.path.join(d, client + "-key.pem")}}


def test_tls_endpoint(binary):
    why = plugin_missing(binary) or dockerd_missing()
    if why:
        skip(why)
    if not shutil.which("openssl"):
        skip("openssl is not installed (apt-get install openssl)")
    d = certificates()
    try:
        with Engine("docker", tls=d) as eng:
            image = eng.image("minimal")
            good = tls_options(d, eng)
            # Plain tcp:// is refused before anything is sent, with its reason.
            code, out = doctor(binary, {"endpoint": good["endpoint"], "images": {}})
            assert code == 1 and "needs TLS client certificates" in out, out
            # doctor through TLS: the engine answers.
            code, out = doctor(binary, dict(good, images={"minimal": image}))
            ep = doctor_line(out, "endpoint")
            assert ep[0].startswith("ok") and "answers: Engine" in ep[0], out
            # A client certificate of another CA: the engine refuses the handshake.
            code, out = doctor(binary, dict(tls_options(d, eng, client="rogue"), images={}))
            assert code == 1 and doctor_line(out, "endpoint")[0].startswith("FAIL"), out
            # An engine certificate our CA did not sign: the relay refuses it.
            code, out = doctor(binary, dict(tls_options(d, eng, ca="other"), images={}))
            assert code == 1 and doctor_line(out, "endpoint")[0].startswith("FAIL"), out

            # The whole way through TLS: acquire, stage (pushes), a script (exec), release.
            with eng.relay(binary, {"minimal": image}, extra_options=good) as r:
                r.initialize()
                acq = acquire(r, "minimal")
                g, vm = acq["guest"], acq["vm"]
                assert eng.inspect(vm)["State"]["Running"] is True
                assert r.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
                assert sh(r, g, "echo over-tls; id -u") == "over-tls\n61000\n"
                res = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert res["isError"] is False, res
                assert eng.inspect(vm) is None, "the container survived its release"
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
