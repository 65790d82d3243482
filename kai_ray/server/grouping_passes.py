"""Grouping passes over a cache, one at a time or on a thread of their own beside scheduling.

Why a thread of their own: a pass over a burst (20,000 new pods, a PodGroup created and a pod
patched for each, one API call at a time) was the first step of every scheduling cycle, so a
cycle waited for all of it: 410 s on the dev cluster, while a pod that fitted waited for the
whole burst to be grouped.  Now `serve` runs passes on their own thread, one per change of the
cache (and at least every `period`, for plans due a refresh), at once again while a pass left
pods for the next; the grouper bounds each pass (`PodGroupController.max_pods`), so the pods it
groups reach the cache, and the next cycle, early.  A cycle schedules what is grouped when it
reads the cache and comes round again for the rest.

A pass never raises: an API failure or a lost lease is one log line and the next pass starts
from the cache as it is then; a bug is logged with its traceback and grouping goes on.  After
each pass the grouper forgets the pods no longer cached, so its memory follows the cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.calls import api_error_message
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.failures import API_FAILURES
from kai_ray.cluster.kube.fence import NotLeader
from kai_ray.cluster.kube.grouping import GroupingResult, PodGrouper, log_grouping

__all__ = ["GroupingPasses"]

log = logging.getLogger(__name__)

_STOP_CHECK_SECONDS: Final = 0.5
_JOIN_SECONDS: Final = 30.0


class GroupingPasses:
    """`grouper`'s passes over `cache`: `run_pass` for one, `start` for a thread of them."""

    def __init__(
        self,
        grouper: PodGrouper,
        cache: ClusterCache,
        events: EventWriter,
        *,
        observe: Callable[[GroupingResult], None] | None = None,
        period: float = 1.0,
    ) -> None:
        self.grouper = grouper
        self.cache = cache
        self.events = events
        self.period = period
        """Seconds between passes when the cache does not change."""
        self._observe = observe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading: Callable[[], bool] | None = None

    @property
    def running(self) -> bool:
        """Whether passes run on their own thread (a caller then runs none itself)."""
        return self._thread is not None and self._thread.is_alive()

    def run_pass(self) -> GroupingResult | None:
        """One pass, logged and observed; None when it failed on the API server (logged)."""
        try:
            grouped = self.grouper.group(self.cache, self.events)
        except NotLeader:
            log.error("grouping pass stopped: writes are fenced, the lease was not renewed in time")
            return None
        except API_FAILURES as error:
            log.warning("grouping pass failed, the next starts from the cache: %s", api_error_message(error))
            return None
        log_grouping(grouped)
        if self._observe is not None:
            self._observe(grouped)
        self.grouper.forget(self.cache.keys("Pod"))
        return grouped

    def start(self, leading: Callable[[], bool] | None = None) -> None:
        """Run passes on a thread of their own until `stop`; with `leading`, only while it says
        this replica leads (a pass while fenced could write nothing)."""
        if self.running:
            return
        self._stop.clear()
        self._leading = leading
        self._thread = threading.Thread(target=self._run, name="kai-grouping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after the pass under way (bounded, so a few seconds at most)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(_JOIN_SECONDS)
            if thread.is_alive():
                log.warning("the grouping thread did not stop within %ss", _JOIN_SECONDS)

    def _run(self) -> None:
        seen, left = -1, 0
        while not self._stop.is_set():
            if not left and not self._changed_or_due(seen):
                return
            seen = self.cache.generation
            if self._leading is not None and not self._leading():
                left = 0  # the next pass reads every change since its last: none is missed
                continue
            try:
                grouped = self.run_pass()
            except Exception:  # a bug of ours: grouping must outlive it, as scheduling does
                log.exception("grouping pass failed; the next starts from the cache")
                grouped = None
            left = grouped.left if grouped is not None else 0

    def _changed_or_due(self, seen: int) -> bool:
        """Wait until the cache moved past generation `seen` or `period` passed (True), or until
        `stop` (False)."""
        deadline = time.monotonic() + self.period
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.cache.wait_changed(seen, min(left, _STOP_CHECK_SECONDS)) != seen:
                return True
        return False
