#!/usr/bin/env python3
"""The egress policy as a setting (issue 23, spec/lifecycle.md §14, docs/egress.md): a bad rule of
MCP_RELAY_EGRESS_ALLOW (or of a profile's relayNetwork) is an invalid setting naming the rule;
a profile's relayNetwork is the deployment's and wins over the variables; a machine plugin
without egress_listeners refuses allow at acquire with the reason (never a fallback to nat)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402
from runs_support import _write_profile, make_variant, structured, text_of  # noqa: E402


def test_bad_rule_is_an_invalid_setting_naming_it(binary):
    env = {"MCP_RELAY_GUEST_NETWORK": "allow", "MCP_RELAY_EGRESS_ALLOW": "pypi.org,files.pythonhosted.org:99999"}
    with Relay(binary, env=env) as r:
        r.initialize()
        res = r.call_tool("relay_status")
        text = text_of(res)
        assert res["isError"] is True, text
        assert 'MCP_RELAY_EGRESS_ALLOW has a bad rule "files.pythonhosted.org:99999": the port must be a whole ' \
               'number 1 to 65535' in text, text
    with Relay(binary, env={"MCP_RELAY_GUEST_NETWORK": "allowed"}) as r:
        r.initialize()
        text = text_of(r.call_tool("relay_status"))
        assert "MCP_RELAY_GUEST_NETWORK must be nat, internet or allow (got allowed)" in text, text


def test_profile_network_wins_and_a_plugin_without_egress_refuses(binary):
    v, why = make_variant(binary, "shim")
    assert v is not None, why
    try:
        from support_common import shim_so
        path = _write_profile(v, {"machine": shim_so(binary)})
        import json
        profile = json.load(open(path))
        profile["relayNetwork"] = {"guestNetwork": "allow", "egressAllow": "pypi.org,*.pythonhosted.org"}
        json.dump(profile, open(path, "w"))
        env = v.env(VM_ENVIRONMENT_FILE=path, MCP_RELAY_GUEST_NETWORK="nat", MCP_RELAY_BACKEND=None)
        with Relay(binary, env=env, state_dir=v.state_dir, project=v.project) as r:
            r.initialize()
            st = r.call_tool("relay_status")
            assert st["isError"] is False, text_of(st)
            assert structured(st)["guestNetwork"] == "allow", structured(st)
            res = r.call_tool("relay_acquire", {"task": "egress", "image": "ubuntu2404", "extractions": []},
                              timeout=120)
            text = text_of(res)
            assert res["isError"] is True, text
            assert "cannot give a guest network allow (it has no egress_listeners" in text, text
            assert structured(res)["error"]["code"] == "backend-refused", structured(res)
        profile["relayNetwork"] = {"guestNetwork": "allow", "egressAllow": "pypi.org,*.*.org"}
        json.dump(profile, open(path, "w"))
        with Relay(binary, env=env, state_dir=v.state_dir, project=v.project) as r:
            r.initialize()
            text = text_of(r.call_tool("relay_status"))
            assert '"relayNetwork"."egressAllow" has a bad rule "*.*.org"' in text, text
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
