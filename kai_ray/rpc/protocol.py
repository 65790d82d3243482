"""`SchedulerServiceLike`: the shape of the service layer, for the code that only calls it.

The gRPC transport (`kai_ray.rpc.transport`) and the in-process client (`kai_ray.rpc.client.LocalClient`)
both take a service of this shape rather than `kai_ray.rpc.api.SchedulerService` itself, so
neither imports the service (and the simulated cluster behind it) merely to talk to one, and tests
can hand them a fake.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

from kai_ray.rpc.caller import Caller
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["SchedulerServiceLike"]


class SchedulerServiceLike(Protocol):
    """The operations of `kai_ray.rpc.api.SchedulerService`.

    Each method gets the request message and the authenticated `Caller`, returns the response
    message and raises `ServiceError` to refuse.  ``watch_workloads`` yields events until
    ``stop`` is set (then it must return promptly): the transport sets it when the client goes
    away or the server stops.
    """

    @property
    def answers_from_memory(self) -> bool:
        """True when no call but ``what_if`` does I/O or waits long (a lock held only briefly is
        fine): the transport then makes the calls on its event loop, not on worker threads."""
        ...

    def submit_workload(
        self, request: pb.SubmitWorkloadRequest, caller: Caller
    ) -> pb.SubmitWorkloadResponse: ...

    def get_workload(self, request: pb.GetWorkloadRequest, caller: Caller) -> pb.Workload: ...

    def list_workloads(
        self, request: pb.ListWorkloadsRequest, caller: Caller
    ) -> pb.ListWorkloadsResponse: ...

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]: ...

    def cancel_workload(self, request: pb.CancelWorkloadRequest, caller: Caller) -> pb.Workload: ...

    def explain(self, request: pb.ExplainRequest, caller: Caller) -> pb.Explanation: ...

    def list_queues(self, request: pb.ListQueuesRequest, caller: Caller) -> pb.ListQueuesResponse: ...

    def what_if(self, request: pb.WhatIfRequest, caller: Caller) -> pb.WhatIfResponse: ...

    def get_cluster(self, request: pb.GetClusterRequest, caller: Caller) -> pb.Cluster: ...
