"""The executor seam: node-dimension feasibility and ranking as array work.

The engine asks two questions of many nodes at once: which nodes can hold
a request, and in what order should candidates be tried. `LocalExecutor`
answers them with numpy over the whole node table; a sharded executor
answers the same questions over partitions and must give the same answer.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from kai_ray.model.resources import EPSILON


class Executor(Protocol):
    def fit_mask(self, request: np.ndarray, available: np.ndarray) -> np.ndarray:
        """Rows whose available vector covers the request in every resource."""
        ...

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Candidate rows, best score first, ties by row (= node name) ascending."""
        ...


class LocalExecutor:
    """Everything in-process over the full node table."""

    def fit_mask(self, request: np.ndarray, available: np.ndarray) -> np.ndarray:
        fits: np.ndarray = np.all(request <= available + EPSILON, axis=1)
        return fits

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(candidates)
        if len(rows) <= 1:
            return rows
        order = np.lexsort((rows, -scores[rows]))
        ranked: np.ndarray = rows[order]
        return ranked
