"""``metalboot partitions agent-token``: make, list, rotate and revoke the
tokens of a partition's boot agents against a real metalboot-server."""

import json

from tests.functional.cli.conftest import assert_one_line_error


def test_agent_token_lifecycle(mb, server, partition):
    made = mb("partitions", "agent-token", "create", partition, "--description", "rack 1")
    assert made.code == 0, made
    token = made.out.strip()
    assert token.startswith("mbat_") and "shown only now" in made.err
    r = server.request("GET", f"/v1/partitions/{partition}/boot-data", token=token)
    assert r.status_code == 200, r.text
    assert server.request("GET", "/v1/machines", token=token).status_code == 403

    listed = mb("partitions", "agent-token", "list", partition, "-o", "json")
    [entry] = json.loads(listed.out)
    assert entry["description"] == "rack 1" and token not in listed.out
    table = mb("partitions", "agent-token", "list", partition)
    assert entry["id"] in table.out and "rack 1" in table.out

    rotated = mb("partitions", "agent-token", "rotate", partition, entry["id"], "--grace", "0",
                 "-o", "json")
    assert rotated.code == 0, rotated
    new = json.loads(rotated.out)
    assert new["replaces"] == entry["id"] and new["token"] != token
    assert server.request("GET", f"/v1/partitions/{partition}/boot-data",
                          token=token).status_code == 401
    assert server.request("GET", f"/v1/partitions/{partition}/boot-data",
                          token=new["token"]).status_code == 200

    revoked = mb("partitions", "agent-token", "revoke", partition, new["id"])
    assert revoked.code == 0 and new["id"] in revoked.out, revoked
    assert server.request("GET", f"/v1/partitions/{partition}/boot-data",
                          token=new["token"]).status_code == 401
    assert_one_line_error(mb("partitions", "agent-token", "revoke", partition, new["id"]),
                          1, "HTTP 404")
    bad = mb("partitions", "agent-token", "rotate", partition, "x", "--grace", "-5")
    assert bad.code == 2 and "'--grace'" in bad.err and "Traceback" not in bad.err
