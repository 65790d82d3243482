"""Grouping passes beside scheduling: one per cache change on a thread of their own, at once again
while a pass left pods, only while leading, outliving a failed pass (issue 35)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

import pytest
import urllib3
from manifest_builders import pod

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.fence import NotLeader
from kai_ray.cluster.kube.grouping import GroupingResult
from kai_ray.server.grouping_passes import GroupingPasses

pytestmark = pytest.mark.unit

LONG = 30.0
"""A wait no passing test sits out."""


class FakeGrouper:
    """Answers each pass from `answers` (a result, or an exception to raise), then with an empty
    result; counts passes and remembers what it was told to forget."""

    def __init__(self, *answers: GroupingResult | BaseException) -> None:
        self.answers = list(answers)
        self.passes = 0
        self.forgotten: list[set[tuple[str, str]]] = []
        self.passed = threading.Condition()

    def group(self, cache: ClusterCache, events: EventWriter) -> GroupingResult:
        with self.passed:
            self.passes += 1
            self.passed.notify_all()
        answer = self.answers.pop(0) if self.answers else GroupingResult()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def forget(self, pods: Collection[tuple[str, str]]) -> None:
        self.forgotten.append(set(pods))

    def tracked(self) -> dict[str, int]:
        return {}

    def wait_for(self, passes: int, timeout: float = LONG) -> bool:
        """Whether `passes` passes ran within `timeout` seconds (woken by each pass)."""
        with self.passed:
            return self.passed.wait_for(lambda: self.passes >= passes, timeout)


def cached_pod(cache: ClusterCache, name: str, version: str) -> None:
    obj = pod(name, gpus=1)
    cache.apply_event("ADDED", "Pod", {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}})


def passes_of(grouper: FakeGrouper, cache: ClusterCache, **options: Any) -> GroupingPasses:
    return GroupingPasses(grouper, cache, EventWriter(None), **options)


def test_a_pass_is_observed_and_the_grouper_forgets_the_pods_no_longer_cached() -> None:
    cache = ClusterCache(None)
    cached_pod(cache, "a", "1")
    observed: list[GroupingResult] = []
    grouper = FakeGrouper(GroupingResult(created=["team-a/pg-a"], annotated=["team-a/a"]))
    result = passes_of(grouper, cache, observe=observed.append).run_pass()
    assert result is not None and observed == [result] and result.created == ["team-a/pg-a"]
    assert grouper.forgotten == [{("team-a", "a")}]


@pytest.mark.parametrize(
    "failure", [NotLeader("fenced"), urllib3.exceptions.ProtocolError("connection lost")], ids=str
)
def test_a_pass_that_fails_on_the_api_server_is_a_log_line_not_an_error(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    grouper = FakeGrouper(failure)
    assert passes_of(grouper, ClusterCache(None)).run_pass() is None
    assert grouper.forgotten == []  # nothing known of this pass: the next starts from the cache
    assert "grouping pass" in caplog.text


def test_passes_run_beside_the_caller_one_per_change_and_at_once_while_pods_are_left() -> None:
    cache = ClusterCache(None)
    grouper = FakeGrouper(GroupingResult(left=2), GroupingResult(left=1), GroupingResult())
    passes = passes_of(grouper, cache, period=LONG)
    passes.start()
    try:
        assert passes.running
        assert grouper.wait_for(3)  # the first pass at once, two more for the pods it left
        cached_pod(cache, "b", "2")
        assert grouper.wait_for(4)  # a change, long before the period
    finally:
        passes.stop()
    assert not passes.running
    assert grouper.passes == 4


def test_no_pass_runs_while_the_replica_does_not_lead() -> None:
    cache = ClusterCache(None)
    grouper = FakeGrouper()
    leading = threading.Event()
    passes = passes_of(grouper, cache, period=0.01)
    passes.start(leading.is_set)
    try:
        cached_pod(cache, "c", "3")
        assert not grouper.wait_for(1, timeout=0.3)  # a change and many periods: still no pass
        leading.set()
        assert grouper.wait_for(1)
    finally:
        passes.stop()


def test_a_pass_that_fails_with_a_bug_is_logged_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = ClusterCache(None)
    grouper = FakeGrouper(KeyError("spec"), GroupingResult())
    passes = passes_of(grouper, cache, period=0.01)
    passes.start()
    try:
        assert grouper.wait_for(2)
    finally:
        passes.stop()
    assert "grouping pass failed" in caplog.text and "KeyError" in caplog.text
