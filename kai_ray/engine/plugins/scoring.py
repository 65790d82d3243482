"""Node and GPU-device scoring plugins (§16.2, §17).

Scores live in separate decades so a higher-order preference always beats a
lower one once summed: GPU-sharing fit (10,000) over immediate availability
(1,000) over CPU-on-CPU-node (10) over binpack/spread (0-9).
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins.base import Plugin
from kai_ray.model.resources import CPU, GPU

SHARED_GPU_FIT_SCORE = 10_000.0
IDLE_FIT_SCORE = 1_000.0
CPU_ON_CPU_NODE_SCORE = 10.0
BINPACK_MAX_SCORE = 9.0


class NodeAvailabilityPlugin(Plugin):
    """Prefer nodes where the task can start now rather than after releases."""

    name = "nodeavailability"

    def node_scores(self, task: Task, free_gpus: np.ndarray) -> np.ndarray:
        return np.where(self.session.fits_idle(task), IDLE_FIT_SCORE, 0.0)


class GpuSharingOrderPlugin(Plugin):
    """Prefer nodes with a shared GPU the task can join (KAI does not check the task type)."""

    name = "gpusharingorder"

    def node_scores(self, task: Task, free_gpus: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(self.session.nodes.table))
        if task.needs_gpu and not task.is_shared_gpu:
            return scores
        memory_of = self.session.nodes.table.gpu_memory
        for row in self.session.nodes.rows_with_groups():
            needed = task.gpu_memory_per_device(float(memory_of[row])) if task.is_shared_gpu else 0.0
            if self.session.nodes.fitting_groups(row, needed):
                scores[row] = SHARED_GPU_FIT_SCORE
        return scores


class ResourceTypePlugin(Plugin):
    """Keep GPU nodes for GPU work."""

    name = "resourcetype"

    def node_scores(self, task: Task, free_gpus: np.ndarray) -> np.ndarray:
        if task.needs_gpu:
            return np.zeros(len(self.session.nodes.table))
        cpu_only = self.session.nodes.table.allocatable[:, GPU] == 0
        return np.where(cpu_only, CPU_ON_CPU_NODE_SCORE, 0.0)


class NodePlacementPlugin(Plugin):
    """Binpack (fullest node first) or spread (emptiest first), per GPU and CPU tasks."""

    name = "nodeplacement"

    def node_scores(self, task: Task, free_gpus: np.ndarray) -> np.ndarray:
        table = self.session.nodes.table
        if task.needs_gpu:
            strategy = self.arguments.get("gpu", "binpack")
            total = table.allocatable[:, GPU]
            free = free_gpus
        else:
            strategy = self.arguments.get("cpu", "binpack")
            total = table.allocatable[:, CPU]
            free = self.session.nodes.idle[:, CPU] + self.session.nodes.releasing[:, CPU]
        has = total > 0
        if strategy == "spread":
            spread: np.ndarray = np.divide(free, total, out=np.zeros_like(free), where=has)
            return spread
        return _binpack(free, has)


def _binpack(free: np.ndarray, has: np.ndarray) -> np.ndarray:
    scores = np.zeros_like(free)
    if not has.any():
        return scores
    low, high = float(free[has].min()), float(free[has].max())
    if high == low:
        scores[has] = 0.0 if high == 0 else BINPACK_MAX_SCORE
        return scores
    scores[has] = BINPACK_MAX_SCORE * (1 - (free[has] - low) / (high - low))
    return scores


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
