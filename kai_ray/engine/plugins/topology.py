"""The `topology` plugin: KAI's topology-aware placement (spec §18).

It answers the allocator's `node_subsets` question for every (sub)group
whose constraint names a topology: the candidate domains, most packed first,
and for a preferred level the node bonus that gathers pods inside the chosen
domain. Domain trees are built once per session, when a job first asks.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Job, PodSet, SubGroupSet, Task
from kai_ray.engine.plugins.base import NodeSubsets, Plugin
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.topology.selection import GroupDemand, NoDomain, choose_domains, level_problem
from kai_ray.engine.topology.tree import ROOT_LEVEL, DomainTree, build_tree
from kai_ray.model.objects import ACTIVE_ALLOCATED
from kai_ray.model.resources import GPU


class TopologyPlugin(Plugin):
    name = "topology"

    def on_session_open(self) -> None:
        self._trees: dict[str, DomainTree] = {}

    def splits_nodes(self, job: Job) -> bool:
        """Asked of every job attempt: answered per PodGroup spec, which the job's tree is built
        from (`jobs.build_job`) and which outlives cycles (`JobFacts.names_topology`)."""
        return job.facts.names_topology

    def node_subsets(
        self, job: Job, group: SubGroupSet | PodSet, tasks: list[Task], node_mask: np.ndarray
    ) -> NodeSubsets | PendingReason | None:
        constraint = group.topology
        if constraint is None or not constraint.topology:
            return None
        who = "job" if group is job.root else f"subgroup {group.name}"
        tree = self._tree(constraint.topology)
        if tree is None:
            return PendingReason(
                PendingCause.TOPOLOGY_MISCONFIGURED,
                f"{who} asks for topology {constraint.topology}, which does not exist",
            )
        if not tasks:
            return None
        problem = level_problem(tree, constraint)
        if problem:
            return PendingReason(PendingCause.TOPOLOGY_MISCONFIGURED, f"{who}: topology constraint {problem}")
        nodes = self.session.nodes
        choice = choose_domains(
            tree,
            constraint,
            self._demand(group, tasks),
            node_mask,
            nodes.idle + nodes.releasing,
            self._shared_free,
        )
        if isinstance(choice, NoDomain):
            closest = f" (closest: {choice.closest})" if choice.closest else ""
            where = "no domain" if choice.level == ROOT_LEVEL else f"no {choice.level} domain"
            return PendingReason(
                PendingCause.NO_TOPOLOGY_DOMAIN,
                f"{where} of topology {tree.name} can hold the {who}'s {len(tasks)} pods{closest}",
            )
        return NodeSubsets(choice.candidates, choice.scores)

    def _tree(self, name: str) -> DomainTree | None:
        tree = self._trees.get(name)
        if tree is None:
            spec = self.session.snapshot.topologies.get(name)
            if spec is None:
                return None
            tree = self._trees[name] = build_tree(spec, self.session.nodes.table)
        return tree

    def _demand(self, group: SubGroupSet | PodSet, tasks: list[Task]) -> GroupDemand:
        requests = np.array([task.request for task in tasks], dtype=np.float64)
        for i, task in enumerate(tasks):
            if task.is_shared_gpu:
                requests[i, GPU] = task.spec.accepted_gpus(self.session.max_gpu_memory)
        pod_sets = group.all_pod_sets() if isinstance(group, SubGroupSet) else [group]
        active = sorted(
            t.node for p in pod_sets for t in p.tasks if t.status in ACTIVE_ALLOCATED and t.node is not None
        )
        return GroupDemand(requests, tuple(t.needs_gpu for t in tasks), np.array(active, dtype=np.int64))

    def _shared_free(self, rows: np.ndarray) -> np.ndarray:
        """Per row: free fractions of its shared GPUs, which fractional tasks may use."""
        nodes = self.session.nodes
        free = np.zeros(len(rows))
        for i, row in enumerate(rows.tolist()):
            memory = float(nodes.table.gpu_memory[row])
            if memory > 0:
                free[i] = sum(group.idle_memory for _, group in nodes.fitting_groups(row, 0.0)) / memory
        return free
