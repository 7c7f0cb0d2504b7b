#!/usr/bin/env python3
"""machine-docker on a Swarm of several hosts (issue 28): four real dockerd started by the test
(swarm_support.py), each in a network namespace of its own joined over addresses that exist only
in those namespaces — three managers and a worker. The relay gets the first manager as its
endpoint, the other two as managers to fail over to, and every node's engine in options.nodes.

- spread: relay_probe reports the four nodes; 12 guests are acquired and the Swarm spreads them
  over every node (the test reads each task's node at the manager); a run on each guest lands on
  the engine of its own node (the test reads the file it wrote through that engine); two guests
  of an image with Xvfb on two different nodes do real runs that draw on their displays, and the
  delivered after-images show it (the test reads the pixels);
  finish leaves no service, container or network on any node.
- faults: a task on a node the relay has no endpoint for is refused naming the node and the
  option, nothing left; a node drained and a node stopped while they hold guests — each guest is reported lost
  with Swarm's task state, Swarm starts no task in its place, release removes the service; the
  other guests keep working.
- failover: the relay's own manager stopped — every lease on the other nodes stays reachable
  through another manager, a new guest can be acquired, release removes everything.
"""
import collections
import glob
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, skip  # noqa: E402
from docker_support import acquire, doctor, plugin_missing, sh, structured, text_of  # noqa: E402
from gui_support import decode_png, share  # noqa: E402
from swarm_support import Swarm  # noqa: E402


# A run that draws on the guest's X display with the X11 protocol itself (the test image has
# Xvfb and Python, no X client): a white rectangle at (100, 100), 600x300, on the root window.
# The run's after-image (capture-x11) must show it.
DRAW = r"""
import os, socket, struct
s = socket.socket(socket.AF_UNIX)
s.connect("/tmp/.X11-unix/X" + os.environ.get("DISPLAY", ":0").lstrip(":").split(".")[0])
s.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, 0, 0))
def read(n):
    b = b""
    while len(b) < n:
        b += s.recv(n - len(b))
    return b
status, _, _, _, words = struct.unpack("<BBHHH", read(8))
assert status == 1, "the X server refused the connection"
setup = read(words * 4)
id_base = struct.unpack("<I", setup[4:8])[0]
vendor_len, _, _, formats = struct.unpack("<HHBB", setup[16:22])
screen = 32 + ((vendor_len + 3) & ~3) + 8 * formats
root, _, white = struct.unpack("<III", setup[screen:screen + 12])
gc = id_base | 1
s.sendall(struct.pack("<BxHIIII", 55, 5, gc, root, 4, white))               # CreateGC, foreground
s.sendall(struct.pack("<BxHIIhhHH", 70, 5, root, gc, 100, 100, 600, 300))  # PolyFillRectangle
s.sendall(struct.pack("<BxH", 43, 1))                                       # GetInputFocus: a round trip
assert read(32)[0] == 1
print("drew", os.getuid(), flush=True)
# An X server resets (clearing the root window) when its last client leaves: a child holds the
# connection while the after-image is taken (what a step starts keeps running).
if os.fork() == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.close(fd)
    import time
    time.sleep(60)
    os._exit(0)
"""


def relay_for(binary, sw, images, **extra):
    first = sw.nodes[0]
    opts = {"endpoint": first.endpoint, "images": images, "reaperIntervalMs": 1000, "maxGuests": 16,
            "managers": [{"endpoint": n.endpoint} for n in sw.nodes[1:] if n.role == "manager"],
            "nodes": {n.name: {"endpoint": n.endpoint} for n in sw.nodes}}
    opts.update(extra)
    env = {"MCP_RELAY_BACKEND": "docker", "MCP_RELAY_DOCKER_OPTIONS": json.dumps(opts), "MCP_RELAY_MAX_GUESTS": "16"}
    return Relay(binary, env=env)


def node_of_guest(sw, acq):
    tasks = sw.tasks(acq["vm"])
    assert len(tasks) == 1, tasks
    return sw.node_of(tasks[0]["NodeID"])


def run(r, g, code, language="shell"):
    return r.call_tool("relay_script", {"guest": g, "language": language, "inline": True, "code": code},
                       timeout=180)


def assert_nothing_left(sw, nodes=None):
    for n in nodes or sw.nodes:
        assert n.containers(plugin="machine-docker") == [], (n.name, n.containers(plugin="machine-docker"))
        code, nets = n.api("GET", "/networks")
        assert code == 200 and not [x["Name"] for x in nets if x["Name"].startswith("relay-")], (n.name, nets)
    code, services = sw.manager().api("GET", "/services")
    assert code == 200 and services == [], services


def wait_gone(sw, nodes=None):
    def gone():
        try:
            assert_nothing_left(sw, nodes)
            return True
        except AssertionError:
            return False
    Swarm.wait("every service, container and network gone", gone, timeout=60)


def test_bad_node_options_are_refused(binary):
    """Each node's endpoint is checked as the plugin's own; the start is refused naming it."""
    why = plugin_missing(binary)
    if why:
        skip(why)
    base = {"endpoint": "unix:///nonexistent/docker.sock"}
    for extra, words in (({"nodes": {"w1": {"endpoint": "tcp://w1:2376"}}}, ["options.nodes.w1", "TLS client"]),
                         ({"nodes": {"w1": {"endpoint": "ssh://relay@w1"}}}, ["options.nodes.w1", "identityFile"]),
                         ({"managers": [{"endpoint": "unix:///a.sock", "bogus": 1}]}, ["options.managers[0]", "bogus"]),
                         ({"placement": {"constraints": "node.role==worker"}}, ["options.placement.constraints"]),
                         ({"discovery": {"ssh": {"user": "relay"}}}, ["options.discovery", "identityFile"])):
        code, out = doctor(binary, dict(base, **extra))
        assert code != 0 and all(w in out for w in words), (extra, out)


def test_guests_spread_over_every_node(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    t0 = time.monotonic()
    with Swarm(managers=3, workers=1) as sw:
        images = {"minimal": sw.load_image("minimal"), "full": sw.load_image("full")}
        print("  swarm of %d up, images on every node: %.1f s" % (len(sw.nodes), time.monotonic() - t0), flush=True)
        with relay_for(binary, sw, images) as r:
            r.initialize()
            probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
            nodes = probe["backend"]["capacity"]["swarmNodes"]
            assert sorted(n["hostname"] for n in nodes) == sorted(n.name for n in sw.nodes), nodes
            assert all(n["ready"] and not n["drained"] and n["reachable"] and n["memoryBytes"] > 0 for n in nodes), nodes
            assert probe["backend"]["capacity"]["docker_limit"] == 16, probe["backend"]["capacity"]

            guests = []
            for i in range(12):
                guests.append(acquire(r, "minimal", task="spread%d" % i))
            placed = collections.Counter(node_of_guest(sw, a).name for a in guests)
            print("  12 guests placed: %s (%.1f s)" % (dict(placed), time.monotonic() - t0), flush=True)
            # The Swarm spreads them; the relay adds no placement of its own.
            assert set(placed) == {n.name for n in sw.nodes}, placed
            probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
            counted = {n["hostname"]: n["guests"] for n in probe["backend"]["capacity"]["swarmNodes"]}
            assert counted == dict(placed), (counted, placed)
            # The same nodes through relay_acquisition_capabilities (the relay's normalised answer).
            caps = r.call_tool("relay_acquisition_capabilities", {}, timeout=120)
            assert caps["isError"] is False, text_of(caps)
            placement = structured(caps)["options"]["placement"]
            assert placement["scheduler"] == "swarm", placement
            seen = {n["name"]: n for n in placement["nodes"]}
            assert {k: v["guests"] for k, v in seen.items()} == dict(placed), (seen, placed)
            for n in sw.nodes:
                s = seen[n.name]
                assert (s["id"], s["role"], s["state"], s["availability"]) == (n.id, n.role, "ready", "active"), s
                assert (s["engine"], s["engine_source"], s["reachable"]) == ("unix", "nodes", True), s
                assert s["memory_bytes"] > 0 and s["nano_cpus"] > 0, s

            # A run on each: it lands on the engine of the guest's own node.
            for a in guests:
                node = node_of_guest(sw, a)
                out = sh(r, a["guest"], "echo %s > /tmp/where; cat /tmp/where; id -u" % a["guest"])
                assert out.split() == [a["guest"], "61000"], out
                task = sw.tasks(a["vm"])[0]
                cid = task["Status"]["ContainerStatus"]["ContainerID"]
                code, info = node.api("GET", "/containers/%s/json" % cid)
                assert code == 200 and info["State"]["Running"], (node.name, code)
                assert node.api("HEAD", "/containers/%s/archive?path=/tmp/where" % cid)[0] == 200, node.name

            # Guests with a display on two different nodes: real runs with after-images.
            full = []
            for i in range(4):
                a = acquire(r, "full", task="display%d" % i)
                if any(node_of_guest(sw, f).name == node_of_guest(sw, a).name for f in full):
                    rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                    assert rel["isError"] is False, text_of(rel)
                    continue
                full.append(a)
                if len(full) == 2:
                    break
            assert len(full) == 2, "the Swarm put every display guest on one node"
            for a in full:
                st = r.call_tool("relay_stage", {"guest": a["guest"]}, timeout=300)
                assert st["isError"] is False, text_of(st)
                assert structured(st)["capabilities"]["snapshots"]["enabled"] is True, structured(st)
                res = run(r, a["guest"], DRAW, language="python")
                assert res["isError"] is False and structured(res)["stdout"] == "drew 61000\n", text_of(res)
                fin = r.call_tool("relay_finish", {"guest": a["guest"]}, timeout=300)
                assert fin["isError"] is False, text_of(fin)
                f = structured(fin)
                assert f["delivered"] is True and f["destructionVerified"] is True, f
                assert f["snapshots"] == "complete", f
                pngs = glob.glob(os.path.join(a["evidencePath"] + "*", "**", "*-after.png"), recursive=True)
                assert pngs, "no after-image in %s" % a["evidencePath"]
                if os.environ.get("RELAY_DOCKER_KEEP_LOG"):  # to look at
                    shutil.copy(pngs[0], os.path.join(os.environ["RELAY_DOCKER_KEEP_LOG"], a["guest"] + ".png"))
                with open(pngs[0], "rb") as fh:
                    _, _, rows = decode_png(fh.read())
                # The white rectangle the run drew on the guest's own display (black elsewhere).
                assert share(rows, (255, 255, 255), (120, 120, 680, 380)) > 0.95, pngs[0]
                assert share(rows, (0, 0, 0), (800, 500, 1200, 760)) > 0.95, pngs[0]
                print("  after-image of %s: %s" % (a["guest"], pngs[0]), flush=True)

            for a in guests:
                rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                assert rel["isError"] is False, text_of(rel)
                assert structured(rel)["destructionVerified"] is True, structured(rel)
            wait_gone(sw)
            print("  finished, nothing left: %.1f s" % (time.monotonic() - t0), flush=True)


def guests_on_every_node(r, sw, image, count, prefix):
    """Acquires guests until each node in `sw` holds at least one (at most `count`)."""
    got = {}
    for i in range(count):
        a = acquire(r, image, task="%s%d" % (prefix, i))
        got.setdefault(node_of_guest(sw, a).name, []).append(a)
        if len(got) == len(sw.nodes):
            break
    assert len(got) == len(sw.nodes), {k: len(v) for k, v in got.items()}
    return got


def assert_lost(r, sw, a, *words):
    res = r.call_tool("relay_script", {"guest": a["guest"], "language": "shell", "inline": True,
                                       "code": "echo still here", "diagnostic": True}, timeout=180)
    text = text_of(res)
    assert res["isError"] or structured(res).get("outcome", {}).get("kind") != "completed", text
    assert "lost" in text and all(w in text for w in words), text
    # Swarm started no task in its place (restart policy none): the relay replays nothing.
    tasks = sw.tasks(a["vm"])
    assert len(tasks) == 1, tasks
    return text


def status_of(r, a):
    return next(x for x in structured(r.call_tool("relay_status"))["guests"] if x["guest"] == a["guest"])


def wait_seen_lost(r, a, *words):
    """With no operation on the guest: relay_status (which answers from memory) says lost within the
    plugin's reaper beat (1 s here), not at the next renewal (60 s); the guest's evidence has the
    guest-lost event; renewal stopped."""
    t0 = time.monotonic()
    st = Swarm.wait("relay_status to say %s is lost" % a["guest"],
                    lambda: (lambda x: x if x["guestState"] == "lost" else None)(status_of(r, a)), timeout=20)
    took = time.monotonic() - t0
    assert all(w in st["lastError"] for w in ("Lost:",) + words), st["lastError"]
    assert st["renewal"]["state"] == "stopped", st["renewal"]
    events = []
    for path in glob.glob(os.path.join(a["evidencePath"], "host", "events", "*.json")):
        with open(path) as f:
            events.append(json.load(f))
    lost = [e for e in events if e["kind"] == "guest-lost"]
    assert len(lost) == 1 and all(w in lost[0]["because"] for w in words), events
    return took


def test_a_drained_and_a_stopped_node(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Swarm(managers=3, workers=1) as sw:
        images = {"minimal": sw.load_image("minimal")}
        worker = next(n for n in sw.nodes if n.role == "worker")
        # A task on a node the relay has no endpoint for: refused at acquire, naming the node and
        # the option, and its service and network removed.
        nodes = {n.name: {"endpoint": n.endpoint} for n in sw.nodes if n is not worker}
        with relay_for(binary, sw, images, nodes=nodes, placement={"constraints": ["node.role==worker"]}) as r:
            r.initialize()
            bad = r.call_tool("relay_acquire", {"task": "nowhere", "image": "minimal", "extractions": []},
                              timeout=300)
            text = text_of(bad)
            assert bad["isError"] and worker.name in text and "options.nodes" in text, text
            assert sw.manager().api("GET", "/services")[1] == [], "the refused guest's service is left"
            wait_gone(sw)
        with relay_for(binary, sw, images) as r:
            r.initialize()
            got = guests_on_every_node(r, sw, "minimal", 12, "fault")
            drained = sw.nodes[2]
            victim_stop, victim_drain = got[worker.name][0], got[drained.name][0]
            for a in (victim_stop, victim_drain):
                assert sh(r, a["guest"], "echo before; echo evidence > /tmp/e") == "before\n"

            # Drained: Swarm shuts the task down; the guest is lost, with Swarm's task state.
            sw.drain(drained)
            Swarm.wait("the task on the drained node shut down",
                       lambda: sw.tasks(victim_drain["vm"])[0]["Status"]["State"] in ("shutdown", "complete",
                                                                                    "failed"), timeout=60)
            took = wait_seen_lost(r, victim_drain, "drain")
            text = assert_lost(r, sw, victim_drain, "drain")
            print("  drained: seen lost %.1f s after the task shut down; %s" % (took, text.split("\n")[0]), flush=True)
            time.sleep(3)
            assert len(sw.tasks(victim_drain["vm"])) == 1, "Swarm re-created the drained guest elsewhere"
            probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
            seen = {n["hostname"]: n for n in probe["backend"]["capacity"]["swarmNodes"]}
            assert seen[drained.name]["drained"] is True, seen

            # Stopped: the node goes down; the guest is lost, with the node's state.
            worker.stop()
            Swarm.wait("the worker reported down",
                       lambda: not any(x["Description"]["Hostname"] == worker.name for x in sw.ready_nodes()),
                       timeout=90)
            took = wait_seen_lost(r, victim_stop, "down")
            text = assert_lost(r, sw, victim_stop, "down")
            print("  stopped: seen lost %.1f s after the node was down; %s" % (took, text.split("\n")[0]), flush=True)
            seen = {n["name"]: n for n in
                    structured(r.call_tool("relay_acquisition_capabilities", {}))["options"]["placement"]["nodes"]}
            assert seen[worker.name]["state"] == "down" and seen[worker.name]["reachable"] is False, seen
            assert seen[drained.name]["availability"] == "drain", seen

            # Release removes the services; the evidence so far is kept.
            rel = r.call_tool("relay_release", {"guest": victim_drain["guest"]}, timeout=300)
            assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            # The stopped node's container cannot be seen: the service goes, and the relay says
            # it cannot verify the rest until the node is back.
            rel = r.call_tool("relay_release", {"guest": victim_stop["guest"]}, timeout=300)
            assert rel["isError"] is True and worker.endpoint in text_of(rel), text_of(rel)
            for a in (victim_drain, victim_stop):
                assert sw.manager().api("GET", "/services/" + a["vm"])[0] == 404
                assert glob.glob(a["evidencePath"] + "*"), a["evidencePath"]
            worker.start()  # back: its agent removes the task of the removed service
            Swarm.wait("the stopped node's container removed", lambda: worker.containers(plugin="machine-docker") == [],
                       timeout=90)
            rel = r.call_tool("relay_release", {"guest": victim_stop["guest"]}, timeout=300)
            assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            # The others keep working on their nodes.
            for name, leases in got.items():
                for a in leases:
                    if a in (victim_drain, victim_stop):
                        continue
                    assert sh(r, a["guest"], "echo fine") == "fine\n", name
                    rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                    assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            wait_gone(sw)


def test_a_manager_stopped(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Swarm(managers=3, workers=1) as sw:
        images = {"minimal": sw.load_image("minimal")}
        with relay_for(binary, sw, images) as r:
            r.initialize()
            got = guests_on_every_node(r, sw, "minimal", 12, "failover")
            first = sw.nodes[0]
            first.stop()  # the relay's own endpoint, and the Swarm's first leader
            # Two managers of three keep the quorum; a new leader is elected.
            def new_leader():
                code, nodes = sw.manager().api("GET", "/nodes")  # an error object while it elects
                return code == 200 and any(x.get("ManagerStatus", {}).get("Leader") and
                                           x["Description"]["Hostname"] != first.name for x in nodes)
            Swarm.wait("a new leader", new_leader, timeout=60)
            for name, leases in got.items():
                for a in leases:
                    if name == first.name:
                        continue
                    assert sh(r, a["guest"], "echo reachable") == "reachable\n", name
            late = acquire(r, "minimal", task="late")
            assert node_of_guest(sw, late).name != first.name
            assert sh(r, late["guest"], "echo late") == "late\n"
            for name, leases in list(got.items()) + [("late", [late])]:
                for a in leases:
                    rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                    assert sw.manager().api("GET", "/services/" + a["vm"])[0] == 404
                    if name != first.name:
                        assert rel["isError"] is False and structured(rel)["destructionVerified"], text_of(rel)
                    else:  # its node is the stopped manager: not verifiable until it is back
                        assert rel["isError"] is True and first.endpoint in text_of(rel), text_of(rel)
            assert "cannot be reached; trying" in r.stderr_text(), r.stderr_text()[-2000:]
            first.start()
            Swarm.wait("the stopped manager's containers removed",
                       lambda: first.containers(plugin="machine-docker") == [], timeout=90)
            for a in got.get(first.name, []):
                rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                assert rel["isError"] is False and structured(rel)["destructionVerified"], text_of(rel)
            wait_gone(sw)


if __name__ == "__main__":
    run_tests(globals())
