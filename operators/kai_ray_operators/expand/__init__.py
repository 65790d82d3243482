"""What workload controllers create, without a cluster: `kai-ray simulate` on workload manifests.

A user's directory holds a RayJob or a PyTorchJob, not the pods its controller
will make; to say whether it fits, the simulator needs those pods exactly as the
controller would create them (replicas, templates, resources, labels, owner
references, the scheduler name and queue label the integration sets), and the
intermediate objects on the owner chain (a Deployment's ReplicaSet, a RayJob's
RayCluster) so the podgrouper groups them as it would on a cluster.

Contract: `expand_workloads(objects)` takes every object of the manifests
(plain dicts, each with `metadata.uid` set) and returns the children the
controllers create and the parents whose status a controller would fill in
(a RayJob's `status.rayClusterName`), plus one `ExpansionProblem` per workload
it cannot expand. It never raises on bad input; a broken workload creates
nothing and every other workload is still expanded. Output order and every
generated name and uid are deterministic.

What comes back (`Expansion`): `children`, every created object, parents
before their children, in input order; `updated`, copies of the input
workloads whose status the controller fills in and the podgrouper reads
(RayJob, RayService), to replace the originals; `problems`, one per workload
that creates nothing, naming the input object and field at fault;
`consumed`, (API group, kind, namespace, name) of every input recognised as
a workload, expanded or not, and of the Trainer runtimes read for
TrainJobs, so the caller's loader can leave them out.

Rules common to every kind live in `engine` (all or nothing per workload;
objects the manifests already hold, by identity or by an owner reference to
the parent, are not created again; two workloads creating one object is a
problem), building blocks in `objects` (uids from `identity.stable_uid`,
controller owner references, pods that copy their template), and each
controller in its family's module: `ray`, `kubeflow`, `trainer`, `batch`,
`apps`, `lws`, `jobset`, `argo`. Each states what it reads, what it
creates and names, and what it does not model; docs/workload-expansion.md
has the same per kind for users. What the expansion models is a
controller's steady state, created at once: objects a controller creates
later (an MPI launcher under `WaitForWorkersReady`, Argo's later steps, a
RayJob's submitter) exist from the start, and autoscaling never happens.
"""

from kai_ray_operators.expand.engine import EXPANDERS, expand_workloads
from kai_ray_operators.expand.model import Expansion, ExpansionProblem

__all__ = ["EXPANDERS", "Expansion", "ExpansionProblem", "expand_workloads"]
