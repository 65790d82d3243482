"""Where the asyncio server runs calls: on its event loop for a service that answers from memory,
on threads otherwise and for WhatIf always, so a call that blocks never holds up the others."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_scheduler import FakeService, serve_fake

from kai_ray.rpc.client import KaiRayClient
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.grpc

TIMEOUT = 10.0


class Gate(threading.Event):
    """A held call waits here; `entered` tells the test that the call arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.entered.set()
        return super().wait(timeout)


@pytest.mark.parametrize(
    ("from_memory", "held", "call"),
    [
        (True, "what_if", lambda client: client.what_if(pb.WhatIfRequest())),
        (False, "get_cluster", lambda client: client.get_cluster(pb.GetClusterRequest())),
    ],
    ids=["what-if-beside-the-loop", "io-bound-service"],
)
def test_a_blocked_call_does_not_hold_up_the_others(from_memory: bool, held: str, call: object) -> None:
    service = FakeService()
    service.answers_from_memory = from_memory  # type: ignore[misc]
    gate = Gate()
    service.hold[held] = gate
    with (
        serve_fake(service) as server,
        KaiRayClient(server.address, timeout=TIMEOUT) as client,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        blocked = pool.submit(call, client)  # type: ignore[arg-type]
        assert gate.entered.wait(TIMEOUT)
        # Answered while the other call is still held (with it on the loop this would time out).
        assert client.list_queues(pb.ListQueuesRequest()).queues
        assert not blocked.done()
        gate.set()
        assert blocked.result(TIMEOUT) is not None
