"""/v1/partitions/{id}/agent-tokens and /v1/partitions/{id}/boot-data: what a
partition's boot agents (metalboot-boot-agent) read and deliver, and the
tokens they do it with. See :mod:`metalboot_framework.partition_data` and
:mod:`metalboot_framework.agent_tokens`."""

from flask import Blueprint, Response, jsonify

from metalboot_framework import agent_tokens, partition_data, partition_dhcp
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint

bp = Blueprint("partition_agents", __name__)
TAGS = ["partition-agents"]


@bp.post("/v1/partitions/<partition_id>/agent-tokens")
@endpoint(role="admin", body=schemas.AgentTokenCreateSchema,
          responses={201: schemas.AgentTokenCreatedSchema}, tags=TAGS,
          example={"description": "agents of rack row 1"})
def create_agent_token(partition_id, body):
    """Make a token for the partition's boot agents (shown only in this answer).

    It lets its holder read this partition's boot data and deliver its boot
    evidence, and nothing else."""
    return jsonify(agent_tokens.create(current_services(), partition_id,
                                       body.get("description", ""))), 201


@bp.get("/v1/partitions/<partition_id>/agent-tokens")
@endpoint(responses={200: schemas.AgentTokenListSchema}, tags=TAGS)
def list_agent_tokens(partition_id):
    """The partition's agent tokens that are valid (never the tokens themselves)."""
    return jsonify({"agent_tokens": agent_tokens.list_tokens(current_services(),
                                                             partition_id)})


@bp.delete("/v1/partitions/<partition_id>/agent-tokens/<token_id>")
@endpoint(role="admin", responses={204: None}, tags=TAGS)
def revoke_agent_token(partition_id, token_id):
    """Revoke an agent token: it stops working at once."""
    agent_tokens.revoke(current_services(), partition_id, token_id)
    return "", 204


@bp.post("/v1/partitions/<partition_id>/agent-tokens/<token_id>/rotate")
@endpoint(role="admin", query=schemas.AgentTokenRotateQuerySchema,
          responses={201: schemas.AgentTokenCreatedSchema}, tags=TAGS)
def rotate_agent_token(partition_id, token_id, query):
    """Replace an agent token: a new one, and the old one expires after ``grace`` seconds."""
    return jsonify(agent_tokens.rotate(current_services(), partition_id, token_id,
                                       query["grace"])), 201


@bp.get("/v1/partitions/<partition_id>/boot-data")
@endpoint(role="agent", responses={200: schemas.BootDataSchema}, tags=TAGS)
def get_boot_data(partition_id):
    """Everything the partition's boot agents serve, and the feed cursor it is current to."""
    return jsonify(partition_data.snapshot(current_services(), partition_id))


@bp.get("/v1/partitions/<partition_id>/boot-data/changes")
@endpoint(role="agent", query=schemas.BootDataChangesQuerySchema,
          responses={200: schemas.BootDataChangesSchema}, extra_errors=(410,), tags=TAGS)
def get_boot_data_changes(partition_id, query):
    """What changed after the cursor ``since``: machines (whole records), machines
    removed, the partition; waits up to ``wait`` seconds for a change."""
    return jsonify(partition_data.changes(current_services(), partition_id, query["since"],
                                          query["wait"]))


@bp.get("/v1/partitions/<partition_id>/boot-data/artifacts/<interface>/<name>")
@endpoint(role="agent", responses={200: None}, tags=TAGS)
def get_boot_data_artifact(partition_id, interface, name):
    """A partition artifact (an ISO), with its SHA-256 in ``Digest`` and
    ``X-Content-SHA256``, for the agents to cache."""
    artifact, digest = partition_data.partition_artifact(current_services(), partition_id,
                                                         interface, name)
    headers = partition_data.digest_headers(digest)
    if artifact.path:
        with open(artifact.path, "rb") as f:
            body = f.read()
    else:
        body = artifact.content
    return Response(body, status=200, headers=headers, content_type=artifact.content_type)


@bp.post("/v1/partitions/<partition_id>/boot-data/evidence")
@endpoint(role="agent", body=schemas.EvidenceDeliverySchema,
          responses={200: schemas.EvidenceDeliveryResultSchema}, tags=TAGS, example={
              "agent": "boot-agent-1", "journal": "5f0c2a9d41e3b786", "records": [{
                  "seq": 1, "machine_id": "4c4c4544-0000-1000-8000-000000000001",
                  "interface": "fake-alt", "kind": "fetch", "path": "boot.ipxe",
                  "client_address": "2001:db8::1", "data": None,
                  "created_at": "2026-12-05T15:00:00Z"}]})
def deliver_evidence(partition_id, body):
    """Evidence an agent journaled (fetches, boot reports); each record is stored
    once per agent and ``seq``, however often it is delivered."""
    return jsonify(partition_data.store_evidence(current_services(), partition_id,
                                                 body["agent"], body["journal"],
                                                 body["records"]))


@bp.post("/v1/partitions/<partition_id>/boot-data/dhcp")
@endpoint(role="agent", body=schemas.DhcpReportSchema,
          responses={200: schemas.DhcpAgentListSchema}, extra_errors=(410,), tags=TAGS,
          example={"agent": "boot-agent-1", "cursor": 42, "interfaces": ["pxe"],
                   "entries": 12, "error": None})
def report_dhcp(partition_id, body):
    """An agent says up to which boot data cursor its DHCP servers hold the
    partition's DHCP entries (prepare steps wait for it); agents report every
    few seconds."""
    return jsonify(partition_dhcp.record_report(current_services(), partition_id, body))


@bp.get("/v1/partitions/<partition_id>/dhcp-agents")
@endpoint(responses={200: schemas.DhcpAgentListSchema}, tags=TAGS)
def list_dhcp_agents(partition_id):
    """The partition's boot agents that apply DHCP entries: the cursor each
    has applied, its last error, and whether prepare steps wait for it."""
    return jsonify(partition_dhcp.agent_list(current_services(), partition_id))
