"""`kai-ray podgrouper`: the podgrouper alone, as KAI runs it (its own Deployment and Lease).

Useful when the scheduler is KAI's own, or when grouping should scale or fail
apart from scheduling. It follows only what grouping reads from a cache (our
pods, PodGroups, PriorityClasses), wakes on any change there (at most every
`period` seconds when nothing changes), and holds its own Lease so that two
replicas never write the same PodGroup at once.  Exit codes are serve's.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry

from kai_ray import __version__
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.grouping import PodGrouper
from kai_ray.cluster.kube.leader import LeaderElector, LeaseTiming, Standing, lease_name
from kai_ray.cluster.kube.permissions import OWNER_READ_PERMISSIONS, PODGROUPER_PERMISSIONS
from kai_ray.server.endpoints import Health
from kai_ray.server.grouping_passes import GroupingPasses
from kai_ray.server.logs import configure_logging
from kai_ray.server.metrics import DroppedEvents, GroupingMetrics
from kai_ray.server.process import (
    DEFAULT_METRICS_ADDRESS,
    EXIT_CLUSTER,
    EXIT_STOPPED,
    ServeError,
    open_endpoints,
    stop_on_signals,
)
from kai_ray.server.scheduler import CACHE_SYNC_TIMEOUT_SECONDS, EVENT_FLUSH_SECONDS
from kai_ray.server.serve import GrouperFactory, connect

__all__ = ["PODGROUPER_KINDS", "GroupingLoop", "PodGrouperOptions", "run_podgrouper"]

log = logging.getLogger(__name__)

PODGROUPER_KINDS: Final = ("Pod", "PodGroup", "PriorityClass")
"""What the podgrouper's cache follows; owners are read through its own short-lived cache."""
LEASE_COMPONENT: Final = "podgrouper"


@dataclass(frozen=True)
class PodGrouperOptions:
    kubeconfig: Path | None
    scheduler_name: str = "kai-scheduler"
    period: float = 1.0
    """Seconds between passes when the cache shows no change."""
    lease_namespace: str = "default"
    identity: str | None = None
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    """``host:port`` for /metrics, /healthz and /readyz; empty disables it."""


def run_podgrouper(options: PodGrouperOptions, make_grouper: GrouperFactory) -> int:
    """Group pods until SIGTERM/SIGINT (exit 0) or lost leadership (exit 1)."""
    configure_logging()
    try:
        connection = connect(
            options.kubeconfig,
            options.lease_namespace,
            lease_name(options.scheduler_name, LEASE_COMPONENT),
            options.identity,
            options.lease_timing,
            PODGROUPER_PERMISSIONS,
            OWNER_READ_PERMISSIONS,
        )
        registry = CollectorRegistry()
        health = Health()
        endpoints = open_endpoints(registry, health, options.metrics_address)
    except ServeError as error:
        log.error("%s", error)
        return error.exit_code
    stop = stop_on_signals()
    log.info(
        "kai-ray %s podgrouper as %s (scheduler %s)", __version__, connection.identity, options.scheduler_name
    )
    loop = GroupingLoop(
        connection.api,
        make_grouper(connection.api),
        options.scheduler_name,
        metrics=GroupingMetrics(registry),
        health=health,
    )
    registry.register(DroppedEvents(lambda: loop.events.dropped))
    try:
        lost = loop.run(stop, options.period, connection.elector)
    finally:
        if endpoints is not None:
            endpoints.close()
    if lost:
        log.error("exiting: leadership was lost; another replica groups pods now")
        return EXIT_CLUSTER
    return EXIT_STOPPED


class GroupingLoop:
    """Grouping passes over a cache of what grouping reads, one per change (or per period), at
    once again while a pass left pods for the next."""

    def __init__(
        self,
        api: Any,
        grouper: PodGrouper,
        scheduler_name: str,
        namespace: str | None = None,
        *,
        metrics: GroupingMetrics | None = None,
        health: Health | None = None,
    ) -> None:
        self.health = health
        self.cache = ClusterCache(
            api, scheduler_name=scheduler_name, namespace=namespace, kinds=PODGROUPER_KINDS
        )
        self.events = EventWriter(api, component=f"{scheduler_name}-podgrouper", background=True)
        self.passes = GroupingPasses(
            grouper, self.cache, self.events, observe=None if metrics is None else metrics.observe
        )

    def run(self, stop: threading.Event, period: float, elector: LeaderElector | None = None) -> bool:
        """Pass after pass until `stop`; True when it ended because leadership was lost.

        A pass that fails on the API server is one line; the next starts from the cache as it is then.
        While the lease is not renewed no pass runs; after a renewal they go on.
        """
        self.cache.start()
        lost = False
        try:
            if not self.cache.sync_or_stop(stop, CACHE_SYNC_TIMEOUT_SECONDS):
                return False
            if self.health is not None:
                self.health.mark_ready()
            if elector is not None and not elector.lead(stop):
                return False
            seen, left = -1, 0
            while not stop.is_set():
                if elector is not None and (standing := elector.wait_to_lead(stop)) is not Standing.LEADING:
                    lost = standing is Standing.LOST
                    break
                seen = self.cache.wait_changed(seen, 0.0 if left else period)
                left = self.run_pass()
        finally:
            if elector is not None and not lost:
                elector.release()
            self.cache.stop()
            self.events.close(EVENT_FLUSH_SECONDS)
        return lost

    def run_pass(self) -> int:
        """One pass (see `GroupingPasses.run_pass`), then the Events' memory of pods gone is
        dropped; returns how many pods it left for the next."""
        grouped = self.passes.run_pass()
        pods = self.cache.keys("Pod")
        self.events.forget({("Pod", namespace, name) for namespace, name in pods})
        return 0 if grouped is None else grouped.left
