"""The benchmark engine behind `rknnlaunch bench`: timed cases, statistics, tables, JSON and plots."""
