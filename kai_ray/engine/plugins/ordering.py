"""Job, task and subgroup ordering plugins (§5.3, §5.4).

Each returns a sort key; the session concatenates keys in plugin order and
appends the stable fallback (creation time, then name), which is exactly
"first non-zero comparator wins".
"""

from __future__ import annotations

from kai_ray.engine.jobs import OrderableJob, PodSet, SubGroupSet, Task
from kai_ray.engine.plugins.base import OrderKey, Plugin

KUBEFLOW_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"


class PriorityPlugin(Plugin):
    name = "priority"

    def job_order_key(self, job: OrderableJob) -> OrderKey:
        return (-job.spec.priority,)


class ElasticPlugin(Plugin):
    name = "elastic"

    def job_order_key(self, job: OrderableJob) -> OrderKey:
        return (job.elastic_rank(),)


class KubeflowPlugin(Plugin):
    name = "kubeflow"

    def task_order_key(self, task: Task) -> OrderKey:
        return (0 if task.spec.labels.get(KUBEFLOW_ROLE_LABEL) in ("master", "launcher") else 1,)


class RayPlugin(Plugin):
    name = "ray"

    def task_order_key(self, task: Task) -> OrderKey:
        return (0 if task.spec.labels.get(RAY_NODE_TYPE_LABEL) == "head" else 1,)


class TaskOrderPlugin(Plugin):
    name = "taskorder"

    def task_order_key(self, task: Task) -> OrderKey:
        priority = task.spec.task_priority
        return (1, 0) if priority is None else (0, -priority)


class SubGroupOrderPlugin(Plugin):
    """Unsatisfied members first, then required before optional, then least filled."""

    name = "subgrouporder"

    def subgroup_order_key(self, member: SubGroupSet | PodSet) -> OrderKey:
        if isinstance(member, PodSet):
            allocated, threshold = member.active_allocated(), member.min_available
        else:
            allocated, threshold = member.satisfied_members(), member.min_members()
        if allocated < threshold:
            return (0, 0, 0.0)
        if threshold == 0:
            return (1, 1, float(allocated))
        return (1, 0, allocated / threshold)
