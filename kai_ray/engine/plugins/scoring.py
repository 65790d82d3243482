"""Node and GPU-device scoring plugins (§16.2, §17).

Scores live in separate decades so a higher-order preference always beats a
lower one once summed: GPU-sharing fit (10,000) over immediate availability
(1,000) over CPU-on-CPU-node (10) over binpack/spread (0-9).
"""

from __future__ import annotations

import numpy as np

from kai_ray.distributed import kernels
from kai_ray.distributed.kernels import CPU_ON_CPU_NODE_SCORE, IDLE_FIT_SCORE, SHARED_GPU_FIT_SCORE
from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins.base import Plugin
from kai_ray.model.resources import CPU, GPU


class NodeAvailabilityPlugin(Plugin):
    """Prefer nodes where the task can start now rather than after releases."""

    name = "nodeavailability"

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray:
        return np.where(self.session.fits_idle(task, rows), IDLE_FIT_SCORE, 0.0)


class GpuSharingOrderPlugin(Plugin):
    """Prefer nodes with a shared GPU the task can join (KAI does not check the task type)."""

    name = "gpusharingorder"

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray | None:
        """None (no opinion, the same sum as zeros) for a whole-GPU task: no shared GPU helps it."""
        if task.needs_gpu and not task.is_shared_gpu:
            return None
        scores = np.zeros(len(rows))
        nodes = self.session.nodes
        for position, row in enumerate(rows.tolist()):
            if not nodes.groups[row]:
                continue
            needed = (
                task.gpu_memory_per_device(float(nodes.table.gpu_memory[row])) if task.is_shared_gpu else 0.0
            )
            if nodes.fitting_groups(row, needed):
                scores[position] = SHARED_GPU_FIT_SCORE
        return scores


class ResourceTypePlugin(Plugin):
    """Keep GPU nodes for GPU work."""

    name = "resourcetype"

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray | None:
        """None (no opinion, the same sum as zeros) for a GPU task."""
        if task.needs_gpu:
            return None
        cpu_only = self.session.nodes.table.allocatable[rows, GPU] == 0
        return np.where(cpu_only, CPU_ON_CPU_NODE_SCORE, 0.0)


class NodePlacementPlugin(Plugin):
    """Binpack (fullest node first) or spread (emptiest first), per GPU and CPU tasks (see kernels)."""

    name = "nodeplacement"

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray:
        nodes = self.session.nodes
        column = GPU if task.needs_gpu else CPU
        strategy = self.arguments.get("gpu" if task.needs_gpu else "cpu", "binpack")
        total = nodes.table.allocatable[rows, column]
        free = nodes.idle[rows, column] + nodes.releasing[rows, column]
        placement = kernels.spread_scores if strategy == "spread" else kernels.binpack_scores
        return placement(free, total)


class GpuPackPlugin(Plugin):
    """Fill the fullest shared GPU first."""

    name = "gpupack"

    def gpu_score(self, used_fraction: float, whole_device: bool) -> float:
        return 0.0 if whole_device else used_fraction


class GpuSpreadPlugin(Plugin):
    """Prefer untouched GPUs."""

    name = "gpuspread"

    def gpu_score(self, used_fraction: float, whole_device: bool) -> float:
        return 1.0 if whole_device else 1.0 - used_fraction
