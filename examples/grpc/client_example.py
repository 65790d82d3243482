"""A Python client of kai-ray's gRPC API: submit a workload, watch it until it runs, explain one
that waits, list the queues.  docs/grpc.md walks through it; tests/rpc/test_grpc_docs.py runs it
against a real server.

Start a server with no cluster at all, then run this:

    kai-ray serve --sim-nodes 4 --grpc-address 127.0.0.1:50051
    python examples/grpc/client_example.py --server 127.0.0.1:50051

With `--token-file` on the server, pass `--token` (or set KAI_RAY_TOKEN); with TLS, `--tls-ca`.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from pathlib import Path

from kai_ray.rpc.client import KaiRayClient, RemoteError
from kai_ray.v1 import scheduler_pb2 as pb


def gang(namespace: str, name: str, pods: int, gpus: int) -> pb.SubmitWorkloadRequest:
    """`pods` pods of `gpus` GPUs each that start together or not at all (a gang)."""
    template = pb.PodTemplate(requests={"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "16Gi"})
    return pb.SubmitWorkloadRequest(
        namespace=namespace,
        name=name,
        workload=pb.WorkloadSpec(
            queue="default-queue",  # the leaf queue of a fresh KAI install
            min_available=pods,
            pod_sets=[pb.PodSet(name="worker", replicas=pods, template=template)],
        ),
    )


def watch_until(
    client: KaiRayClient, workload_id: str, namespace: str, done: Callable[[pb.Workload], bool]
) -> pb.Workload:
    """Watch the namespace until the workload's view satisfies `done`.  The stream starts with
    every current workload (ADDED), so a workload already there is seen at once."""
    stop = threading.Event()
    for event in client.watch_workloads(pb.WatchWorkloadsRequest(namespace=namespace), stop):
        workload = event.workload
        if workload.id != workload_id:
            continue
        print(f"  {pb.WorkloadEvent.Type.Name(event.type)}: {pb.WorkloadState.Name(workload.state)}")
        if done(workload):
            stop.set()
            return workload
    raise RuntimeError("the server ended the watch")  # it does so only when it stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--token", default=os.environ.get("KAI_RAY_TOKEN"))
    parser.add_argument("--tls-ca", type=Path, help="PEM CA that signed the server's certificate")
    parser.add_argument("--namespace", default="ml")
    args = parser.parse_args()

    with KaiRayClient(args.server, token=args.token, tls_ca=args.tls_ca) as client:
        # 1. Submit: 2 pods × 4 GPUs fit on one 8-GPU node.
        submitted = client.submit_workload(gang(args.namespace, "finetune", pods=2, gpus=4))
        print(f"submitted {submitted.id}: {pb.WorkloadState.Name(submitted.workload.state)}")

        # 2. Watch until it runs (the simulated cluster binds it in its next cycle).
        running = watch_until(client, submitted.id, args.namespace, lambda w: w.state == pb.RUNNING)
        nodes = sorted({p.node for p in running.placements})
        print(f"{running.id} runs on {', '.join(nodes)}: {running.allocated['nvidia.com/gpu']:g} GPUs")

        # 3. Explain one that cannot start: 5 pods of 8 GPUs, more whole nodes than a 4-node
        #    cluster has.  The reason is data, not only prose.
        waiting = client.submit_workload(gang(args.namespace, "too-big", pods=5, gpus=8))
        # Until a cycle has looked at it, the reason is only "NotScheduledYet".
        watch_until(client, waiting.id, args.namespace, lambda w: w.reason != "NotScheduledYet")
        explanation = client.explain(pb.ExplainRequest(id=waiting.id))
        print(f"{explanation.id}: {explanation.cause}: {explanation.message}")
        gang_status = explanation.gang
        print(
            f"  gang: {gang_status.min_available} must start together, "
            f"{gang_status.pods_bound} bound, {gang_status.pods_placeable} would fit now"
        )
        total = explanation.nodes_total
        for failure in explanation.predicates:
            print(f"  {failure.nodes} of {total} nodes: {failure.message} [{failure.predicate}]")
        if explanation.to_free:
            print("  to free: " + ", ".join(f"{k} {v:g}" for k, v in sorted(explanation.to_free.items())))

        # 4. The queues, with fair share and allocation per resource.
        for queue in client.list_queues(pb.ListQueuesRequest()).queues:
            gpu = queue.resources["nvidia.com/gpu"]
            print(
                f"queue {queue.name}: fair share {gpu.fair_share:g} GPUs, allocated {gpu.allocated:g}, "
                f"requested {gpu.requested:g}; {queue.workloads_running} running, "
                f"{queue.workloads_pending} pending"
            )

        # Errors carry the gRPC status and the field at fault.
        try:
            client.submit_workload(gang(args.namespace, "finetune", pods=1, gpus=1))
        except RemoteError as error:
            print(f"again: {error.status}, field {error.field!r}: {error.message}")


if __name__ == "__main__":
    main()
