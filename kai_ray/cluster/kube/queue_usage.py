"""What a Queue's status says: its allocation, non-preemptible allocation and request, as
KAI writes them (quantities in wire form), made from the engine's queue accounting."""

from __future__ import annotations

from typing import Any, Protocol

from kai_ray.api.constants import RESOURCE_CPU, RESOURCE_GPU, RESOURCE_MEMORY

__all__ = ["QueueArrays", "quantity", "queue_usage_from_book"]


def quantity(value: Any) -> str:
    """A ResourceList value in wire form: numbers become the shortest exact decimal."""
    if isinstance(value, bool):
        raise TypeError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


class QueueArrays(Protocol):
    """The parts of the engine's ``QueueBook`` that queue status is made of (columns cpu, memory, gpu)."""

    names: list[str]
    request: Any

    @property
    def allocated(self) -> Any: ...

    @property
    def allocated_non_preemptible(self) -> Any: ...


def queue_usage_from_book(book: QueueArrays) -> dict[str, dict[str, dict[str, str]]]:
    """Queue status ResourceLists from a session's queue accounting.

    Units follow the engine (cpu millicores, memory bytes, GPUs in devices) and come out as
    KAI writes them: ``cpu: "1500m"``, ``memory: "2147483648"``, ``nvidia.com/gpu: "1.5"``.
    All three resources are always present, so a resource dropping to zero is written as 0.
    """

    def resources(row: Any) -> dict[str, str]:
        cpu, memory, gpu = (float(v) for v in row)
        return {
            RESOURCE_CPU: f"{round(cpu)}m",
            RESOURCE_MEMORY: str(round(memory)),
            RESOURCE_GPU: quantity(round(gpu, 6)),
        }

    return {
        name: {
            "allocated": resources(book.allocated[i]),
            "allocatedNonPreemptible": resources(book.allocated_non_preemptible[i]),
            "requested": resources(book.request[i]),
        }
        for i, name in enumerate(book.names)
    }
