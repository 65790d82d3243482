"""Split cycles: a cluster's nodes and jobs dealt to parts that allocate in parallel (see `cycle`)."""
