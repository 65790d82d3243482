"""An Event the fence refused is not remembered as sent (issue 35, item 3's follow-up).

A leader fenced by an outage that then renews its lease goes on scheduling; the Events it
could not write meanwhile must be written again when the same explanation comes round,
not suppressed as duplicates of Events that never reached the API server.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.fence import FencedApiClient, Leadership

pytestmark = pytest.mark.unit


def test_an_event_refused_by_the_fence_is_said_again_once_leading() -> None:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # never reached: the fence refuses first
    leadership = Leadership(renew_deadline=10.0)
    writer = EventWriter(FencedApiClient(configuration, leadership), component="test", background=True)
    ref = ObjectRef.podgroup("ns", "pg")
    try:
        assert writer.record(ref, "Normal", "Unschedulable", "no room", dedupe=True)
        assert writer.flush(timeout=10)
        assert writer.dropped == 1
        assert writer.record(ref, "Normal", "Unschedulable", "no room", dedupe=True), "suppressed as sent"
        assert writer.flush(timeout=10)
        assert writer.dropped == 2
    finally:
        writer.close(1.0)
