#!/usr/bin/env python3
"""bench/runs: end-to-end relay_script and relay_stage through transfer-ssh against the raw
OpenSSH baselines, with the same sshd and the same multiplexing (bench/runs/README.md)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import runs_support as rs  # noqa: E402

FILES = 10000
FILE_BYTES = 53687  # 10,000 x 53,687 = 536,870,000 bytes: just under the 512 MiB limit


def ssh_base(ssh, control):
    """The ssh command line of the baselines; control None: no multiplexing (a connection of its own)."""
    return ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + ssh["knownHostsFile"],
            "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-i", ssh["identityFile"],
            "-p", str(ssh["port"]), "-o", "ControlPath=" + (control or "none"), "-l", ssh["user"]]


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def make_data(folder):
    mark = folder + ".complete"
    if os.path.exists(mark):
        return
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(FILES):
        d = os.path.join(folder, "d%02d" % (i % 100))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
            f.write(os.urandom(FILE_BYTES))
    open(mark, "w").close()


def report_script(ours, raw):
    mo, mr = statistics.median(ours), statistics.median(raw)
    print("relay_script `true` (no snapshots), %d rounds:" % len(ours))
    print("  relay_script median %.1f ms; ssh host true median %.1f ms; ratio %.2fx"
          % (mo * 1000, mr * 1000, mo / mr))
    print("  relay_script: " + " ".join("%.0f" % (x * 1000) for x in ours))
    print("  ssh true:     " + " ".join("%.0f" % (x * 1000) for x in raw), flush=True)


def median_ms(samples):
    return statistics.median(samples) * 1000


def gui_attach(args):
    """A 1280x800 run with snapshots over transfer-ssh (spec/guest.md §16.3): the time to the result
    with the after-image attached from the run's own answer, against the same run with it
    pending (the guest's receiver told RELAY_RECEIVER_ATTACH=off) and against the same attached
    run with every capture one-shot (RELAY_RECEIVER_CAPTURE_RESIDENT=off: no resident
    relay-x11shot, spec/guest.md §17 item 5), rounds interleaved."""
    kinds = (("attached", {}), ("pending", {"RELAY_RECEIVER_ATTACH": "off"}),
             ("attached, one-shot captures", {"RELAY_RECEIVER_CAPTURE_RESIDENT": "off"}))
    vs = []
    try:
        for label, env in kinds:
            v, why = rs.make_variant(args.binary, "ssh-x11", sshd_env=env)
            if v is None:
                print("gui attach: cannot run: %s" % why)
                return
            vs.append((label, v))
        relays = [v.relay() for _label, v in vs]
        guests = []
        for (label, v), cm in zip(vs, relays):
            r = cm.__enter__()
            r.initialize()
            g = v.acquire(r)
            assert rs.stage(r, g["guest"])["isError"] is False
            guests.append((label, r, g["guest"], "export DISPLAY=%s\ntrue" % v.display))
        statuses = {}
        samples = {label: [] for label, _v in vs}
        for i in range(args.gui_runs + 2):
            for label, r, name, code in guests:
                t = timed(lambda: statuses.__setitem__(label, rs.structured(rs.run(
                    r, name, code, snapshots={"afterIntervalMs": 0}))["imageDelivery"]["status"]))
                if i >= 2:  # two warm-up rounds
                    samples[label].append(t)
        assert statuses == {"attached": "attached", "pending": "pending",
                            "attached, one-shot captures": "attached"}, statuses
        a, p = median_ms(samples["attached"]), median_ms(samples["pending"])
        o = median_ms(samples["attached, one-shot captures"])
        print("relay_script 1280x800 with snapshots over transfer-ssh, %d rounds each:" % args.gui_runs)
        print("  attached median %.1f ms; pending median %.1f ms; ratio %.2fx; attached with one-shot "
              "captures %.1f ms" % (a, p, a / p, o))
        for label, _v in vs:
            print("  %-28s " % (label + ":") + " ".join("%.0f" % (x * 1000) for x in samples[label]))
        sys.stdout.flush()
        for cm in relays:
            cm.__exit__(None, None, None)
        shot_floor(vs[0][1], args.gui_runs)
        return a, p, o
    finally:
        for _label, v in vs:
            v.cleanup()


def shot_floor(v, n):
    """The capture program alone on the same display: one-shot as the receiver started it before
    (a new process, a new X connection, the 1280x800 root window read and encoded as PNG) and,
    when the build has it, resident (`relay-x11shot --serve`: one line in, one line out); rounds
    interleaved. A run with snapshots takes two shots."""
    shot = os.path.join(os.environ.get("RELAY_BUILD_DIR", ""), "libexec", "mcp-relay", "receivers",
                        "linux-x86_64", "relay-x11shot")
    if not os.path.exists(shot):
        print("  (no relay-x11shot at %s: the shot floor is not measured)" % shot)
        return
    out = os.path.join(v.root, "floor-shot.png")
    # One-shot first, with no other client on the display (as a guest whose display has none: the
    # X server resets itself whenever its last client leaves), then resident.
    xs, rs_ = [], []
    for _ in range(n + 2):
        if os.path.exists(out):
            os.unlink(out)
        xs.append(timed(lambda: subprocess.run([shot, "--display", v.display, "--out", out], check=True,
                                               stdout=subprocess.DEVNULL)))
    size = os.path.getsize(out)
    serve = subprocess.Popen([shot, "--display", v.display, "--serve"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def resident():
        serve.stdin.write((out + "\n").encode())
        serve.stdin.flush()
        if b"screenshot_file_path" not in serve.stdout.readline():
            raise RuntimeError("no resident shot")
    for _ in range(n + 2):
        os.unlink(out)
        try:
            rs_.append(timed(resident))
        except (BrokenPipeError, RuntimeError):
            rs_ = None
            break
    try:
        serve.stdin.close()
    except BrokenPipeError:
        pass
    serve.wait()
    xs = xs[2:]
    print("  relay-x11shot alone on that display: one-shot median %.1f ms a shot (%d bytes of PNG); two "
          "shots %.1f ms" % (median_ms(xs), size, 2 * median_ms(xs)), flush=True)
    if rs_:
        print("  resident (relay-x11shot --serve, one connection): median %.1f ms a shot; two shots %.1f ms"
              % (median_ms(rs_[2:]), 2 * median_ms(rs_[2:])), flush=True)
    else:
        print("  (this relay-x11shot has no --serve)", flush=True)


def local_true(args):
    """relay_script of `true` on machine-local without snapshots (the guest has no display);
    tests/integration/test_receiver_stdin.py counts the receiver's fsync-family calls (3)."""
    v, why = rs.make_variant(args.binary, "local")
    if v is None:
        print("machine-local: cannot run: %s" % why)
        return
    try:
        with v.relay(MCP_RELAY_LOCAL_OPTIONS='{"display":"off"}') as r:
            r.initialize()
            g = v.acquire(r)
            assert rs.stage(r, g["guest"])["isError"] is False
            for _ in range(3):
                rs.run(r, g["guest"], "true")
            ours = [timed(lambda: rs.run(r, g["guest"], "true")) for _ in range(args.runs)]
            print("relay_script `true` on machine-local (no snapshots), %d rounds:" % args.runs)
            print("  median %.1f ms" % median_ms(ours))
            print("  samples: " + " ".join("%.0f" % (x * 1000) for x in ours), flush=True)
    finally:
        v.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "30")))
    ap.add_argument("--stages", type=int, default=int(os.environ.get("STAGES", "8")))
    ap.add_argument("--data", default=os.environ.get("DATA", "/var/tmp/relay-runs-bench-data"))
    ap.add_argument("--skip-stage", action="store_true")
    ap.add_argument("--skip-gui", action="store_true")
    ap.add_argument("--gui-runs", type=int, default=int(os.environ.get("GUI_RUNS", "15")))
    args = ap.parse_args()
    if not args.skip_gui:
        gui_attach(args)
        local_true(args)
    v, why = rs.make_variant(args.binary, "ssh")
    if v is None:
        print("cannot run: %s" % why)
        return 2
    results = {}
    try:
        ssh = json.load(open(v.control))["leaseExtra"]["ssh"]
        control = os.path.join(v.root, "raw.sock")
        base = ssh_base(ssh, control)
        subprocess.run(base + ["-o", "ControlMaster=yes", "-o", "ControlPersist=600", "-N", "-f", "127.0.0.1"],
                       check=True)

        # 1. relay_script `true` against `ssh host true` (both multiplexed, interleaved).
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            assert rs.stage(r, g["guest"])["isError"] is False
            for _ in range(3):  # warm both paths
                rs.run(r, g["guest"], "true")
                subprocess.run(base + ["127.0.0.1", "true"], check=True)
            ours, raw = [], []
            for _ in range(args.runs):
                ours.append(timed(lambda: rs.run(r, g["guest"], "true")))
                raw.append(timed(lambda: subprocess.run(base + ["127.0.0.1", "true"], check=True)))
            results["script"] = (ours, raw)
            report_script(ours, raw)

        # 2. relay_stage of 512 MiB / 10,000 files against tar | ssh and scp -r.
        if not args.skip_stage:
            make_data(args.data)
            ws = os.path.join(v.project, "ws")
            shutil.copytree(args.data, ws)
            ours, tar, tar_mux, scp = [], [], [], []
            # The baseline is a plain `tar c | ssh host tar x`: its ssh opens a
            # connection, as relay_stage does on a fresh guest. The same pipe over the
            # already open master is measured too.
            fresh = ssh_base(ssh, None)

            def relay_round(i):
                with v.relay() as r:
                    r.initialize()
                    g = v.acquire(r, task="bench%d" % i)
                    res = None

                    def stage():
                        nonlocal res
                        res = rs.stage(r, g["guest"], workspace="ws")
                    ours.append(timed(stage))
                    assert res["isError"] is False, rs.text_of(res)
                    subprocess.run(["rm", "-rf", g["guestRoot"]], check=True)

            def tar_round(i, multiplexed):
                dest = "/var/tmp/relay-runs-bench-raw-%d" % i
                ssh_cmd = base if multiplexed else fresh
                cmd = "tar -C %s -cf - . | %s 'mkdir -p %s && tar -C %s -xf -'" % (
                    ws, " ".join(ssh_cmd + ["127.0.0.1"]), dest, dest)
                (tar_mux if multiplexed else tar).append(
                    timed(lambda: subprocess.run(cmd, shell=True, check=True)))
                subprocess.run(["rm", "-rf", dest], check=True)

            def scp_round(i):
                dest = "/var/tmp/relay-runs-bench-raw-%d" % i
                scp_cmd = ["scp", "-q", "-r", "-F", "/dev/null", "-o", "BatchMode=yes",
                           "-o", "UserKnownHostsFile=" + ssh["knownHostsFile"], "-o", "IdentitiesOnly=yes",
                           "-i", ssh["identityFile"], "-P", str(ssh["port"]), "-o", "ControlPath=" + control,
                           ws, "root@127.0.0.1:" + dest]
                scp.append(timed(lambda: subprocess.run(scp_cmd, check=True)))
                subprocess.run(["rm", "-rf", dest], check=True)

            # Round i starts with contender i mod 4, so each goes first equally often
            # over four rounds; `sync` before every timed contender, so none starts
            # while the previous one's 512 MiB are still being written back.
            contenders = [relay_round, lambda i: tar_round(i, False), lambda i: tar_round(i, True), scp_round]
            for i in range(args.stages):
                for k in range(len(contenders)):
                    subprocess.run(["sync"], check=True)
                    contenders[(i + k) % len(contenders)](i)
            results["stage"] = (ours, tar, tar_mux, scp)
        subprocess.run(base + ["-O", "exit", "127.0.0.1"], stderr=subprocess.DEVNULL)
    finally:
        v.cleanup()

    if "stage" in results:
        ours, tar, tar_mux, scp = results["stage"]
        mo, mt, mm, ms = (statistics.median(x) for x in (ours, tar, tar_mux, scp))
        print("relay_stage of %d files, %d bytes, %d rounds:" % (FILES, FILES * FILE_BYTES, len(ours)))
        print("  relay_stage median %.2f s" % mo)
        print("  tar | ssh host tar x (a connection of its own) median %.2f s: ratio %.2fx" % (mt, mo / mt))
        print("  tar | ssh over the open master median %.2f s: ratio %.2fx" % (mm, mo / mm))
        print("  scp -r over the open master median %.2f s: ratio %.2fx" % (ms, mo / ms))
        print("  relay_stage:   " + " ".join("%.2f" % x for x in ours))
        print("  tar|ssh:       " + " ".join("%.2f" % x for x in tar))
        print("  tar|ssh (mux): " + " ".join("%.2f" % x for x in tar_mux))
        print("  scp -r:        " + " ".join("%.2f" % x for x in scp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
