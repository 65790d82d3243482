"""Whether a Kubernetes label selector selects an object's labels.

A pure function of the selector and the labels, shared by the engine (inter-pod affinity, spread)
and the backends, so every place that asks gets Kubernetes' answer.
"""

from __future__ import annotations

from kai_ray.model.objects import LabelRequirement, LabelSelector


def selects(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    """An absent selector selects nothing; an empty one selects everything (Kubernetes' rule)."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in selector.match_labels):
        return False
    return all(_holds(requirement, labels) for requirement in selector.expressions)


def _holds(requirement: LabelRequirement, labels: dict[str, str]) -> bool:
    return value_in(requirement.operator, requirement.values, labels.get(requirement.key))


def value_in(operator: str, values: tuple[str, ...], value: str | None) -> bool:
    """Kubernetes' set-based operators on one label's value (None: the label is absent); an
    unknown operator admits nothing (conversion refuses one before it gets here)."""
    match operator:
        case "In":
            return value is not None and value in values
        case "NotIn":
            return value is None or value not in values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
    return False
