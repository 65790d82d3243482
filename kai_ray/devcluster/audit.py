"""The dev cluster's audit log: which identity, with which user agent, changed what.

Opt-in (`start(audit=True)`): tests of leadership and RBAC read it to see every write a
process made, and every refusal it got, from the API server's own record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kai_ray.devcluster.binaries import DevClusterError
from kai_ray.devcluster.processes import write_private

if TYPE_CHECKING:
    from kai_ray.devcluster.control_plane import DevCluster

__all__ = ["AUDIT_LOG", "AUDIT_POLICY", "prepare_audit", "read_audit_events"]

AUDIT_LOG = "audit.log"
AUDIT_POLICY = "audit-policy.yaml"
AUDITED_VERBS = ("create", "update", "patch", "delete", "deletecollection")
"""Verbs the audit policy records; reads (get/list/watch) are left out to keep the log small."""


def prepare_audit(dir: Path) -> Path:
    """Write the audit policy and create the (empty, private) audit log; returns the log's path.

    The policy records mutations at ``Metadata`` level (who, user agent, verb, object, response
    code; no bodies, so no Secret data) and nothing else.  ``RequestReceived`` is omitted so
    each request is one line, written once the response code is known.  The log is created
    here, mode 0600, because it names every identity that changed something; the apiserver
    appends to it, and its rotation keeps the mode.
    """
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "verbs": list(AUDITED_VERBS)}, {"level": "None"}],
    }
    (dir / AUDIT_POLICY).write_text(yaml.safe_dump(policy, sort_keys=False))
    log = dir / AUDIT_LOG
    write_private(log, b"")
    return log


def read_audit_events(cluster: DevCluster) -> list[dict[str, Any]]:
    """The audit events logged so far, oldest first (one ``audit.k8s.io/v1`` Event per dict).

    The apiserver logs in blocking mode, so a request's event is on disk once the request has
    returned; a line still being appended (no newline yet) is skipped rather than misparsed.
    """
    if cluster.audit_log is None:
        raise DevClusterError(f"the cluster in {cluster.dir} was started without audit=True")
    lines = cluster.audit_log.read_bytes().split(b"\n")[:-1]  # the last piece is unterminated
    return [json.loads(line) for line in lines if line.strip()]
