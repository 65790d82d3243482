"""Where `serve` keeps its recorded queue usage: one ConfigMap beside the leader lease.

A ConfigMap rather than annotations or status on the Queue objects because the history is one
thing: the capacity of the cluster and every queue's allocation belong to the same samples, and
usage is their ratio, so it must be written and read back whole (one object is one atomic write).
Queues are also the users' objects, applied from Git: a field the scheduler rewrites every minute
would fight `kubectl apply` and GitOps diffs. It lives in the lease namespace, which the scheduler
already owns, and every write goes through the fenced client, so a replica that lost the lease
cannot overwrite what the new leader recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

DATA_KEY = "usage.json"
MAX_BYTES = 900 * 1024
"""Below the 1 MiB object limit with room for metadata; a longer history is not written."""


def config_map_name(scheduler_name: str) -> str:
    return f"{scheduler_name}-queue-usage"


class UsageStore:
    """Reads and replaces the usage ConfigMap `name` in `namespace`.

    Writes carry the resourceVersion last read or written, so two writers cannot both succeed
    silently: a conflict is an ApiException the caller logs, and the next write reads again.
    """

    def __init__(self, api: Any, namespace: str, name: str) -> None:
        self._core = client.CoreV1Api(api)
        self.namespace = namespace
        self.name = name
        self._version: str | None = None

    def read(self) -> dict[str, Any] | None:
        """The stored history, or None when there is none yet. ValueError if it does not parse."""
        try:
            found = self._core.read_namespaced_config_map(self.name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                self._version = None
                return None
            raise
        self._version = _version_of(found)
        text = (found.data or {}).get(DATA_KEY)
        if text is None:
            return None
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{self.namespace}/{self.name}: {DATA_KEY} is not a JSON object")
        return data

    def write(self, data: Mapping[str, Any]) -> None:
        """Create or replace the ConfigMap with `data`; ValueError when it is too large to store."""
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        if len(text) > MAX_BYTES:
            raise ValueError(f"usage history of {len(text)} bytes is over the {MAX_BYTES}-byte limit")
        if self._version is None:
            self.read()
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=self._version,
                labels={"app.kubernetes.io/managed-by": "kai-ray"},
            ),
            data={DATA_KEY: text},
        )
        try:
            if self._version is None:
                written = self._core.create_namespaced_config_map(self.namespace, body)
            else:
                written = self._core.replace_namespaced_config_map(self.name, self.namespace, body)
        except ApiException:
            self._version = None
            raise
        self._version = _version_of(written)


def _version_of(config_map: client.V1ConfigMap) -> str | None:
    return None if config_map.metadata is None else config_map.metadata.resource_version
