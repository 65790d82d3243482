"""One module per workload family; each plugin is a `Grouper` function (see `context.py`)."""
