"""`kai-ray group --output table`: a case's result for a person to read."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["print_grouping"]

SUBGROUP_COLUMNS = ("name", "parent", "minAvailable", "minSubGroup", "pods", "topology")


def print_grouping(result: Any, console: Console) -> None:
    """The PodGroup's fields, then its SubGroups; `conformance.run_case`'s JSON value as tables."""
    if not isinstance(result, dict):
        console.print("no PodGroup: the plugin leaves this pod ungrouped")
        return
    fields = Table(title=str(result.get("name", "plugin")), show_header=False)
    for key, value in result.items():
        if key != "subGroups":
            fields.add_row(key, value if isinstance(value, str) else json.dumps(value))
    console.print(fields)
    subgroups = Table(title="SubGroups")
    for column in SUBGROUP_COLUMNS:
        subgroups.add_column(column)
    for subgroup in result.get("subGroups") or []:
        subgroups.add_row(*(json.dumps(subgroup[column]) for column in SUBGROUP_COLUMNS))
    if subgroups.row_count:
        console.print(subgroups)
