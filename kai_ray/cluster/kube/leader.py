"""Leader election on a coordination.k8s.io Lease, so two replicas never schedule at once.

The holder renews the lease every cycle; another replica takes over only
after the lease has gone unrenewed for its whole duration. Every write
carries the resourceVersion it read, so two candidates racing for an
expired lease cannot both win: the API server refuses the second update.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

DEFAULT_LEASE_SECONDS = 15

API_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""A refused write (409: another replica won) or an unreachable server: not leader, never a crash."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class LeaderElector:
    api: Any
    namespace: str
    name: str
    identity: str
    lease_seconds: int = DEFAULT_LEASE_SECONDS

    def __post_init__(self) -> None:
        self._leases = client.CoordinationV1Api(self.api)

    def try_acquire_or_renew(self) -> bool:
        """True while this replica holds the lease; never raises on conflicts or outages."""
        try:
            lease = self._leases.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return self._create()
            return False
        except API_FAILURES:
            return False
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        now = _now()
        if spec.holder_identity != self.identity and not self._expired(spec, now):
            return False
        taking_over = spec.holder_identity != self.identity
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = self.lease_seconds
        spec.renew_time = now
        if taking_over:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        try:
            self._leases.replace_namespaced_lease(self.name, self.namespace, lease)
        except API_FAILURES:
            return False
        return True

    def release(self) -> None:
        """Give the lease up at shutdown so a standby can take over at once."""
        try:
            lease = self._leases.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = ""
            lease.spec.renew_time = _now() - dt.timedelta(seconds=self.lease_seconds + 1)
            self._leases.replace_namespaced_lease(self.name, self.namespace, lease)
        except API_FAILURES:
            return

    def _create(self) -> bool:
        now = _now()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.lease_seconds,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            self._leases.create_namespaced_lease(self.namespace, body)
        except API_FAILURES:
            return False
        return True

    def _expired(self, spec: Any, now: dt.datetime) -> bool:
        if not spec.holder_identity or spec.renew_time is None:
            return True
        duration = spec.lease_duration_seconds or self.lease_seconds
        renewed: dt.datetime = spec.renew_time
        if renewed.tzinfo is None:
            renewed = renewed.replace(tzinfo=dt.UTC)
        return now > renewed + dt.timedelta(seconds=duration)
