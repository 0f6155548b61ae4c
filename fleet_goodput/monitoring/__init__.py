"""Goodput where operators already look: the store's figures as Prometheus metrics (docs/monitoring.md).

`openmetrics` reads a committed run's views into metric families: cumulative chip-second
counters whose increases over any range give each factor as a ratio of sums, and gauges of
the last complete day's factors. `mpg export openmetrics` writes their history with
timestamps (for `promtool tsdb create-blocks-from openmetrics`).
"""
