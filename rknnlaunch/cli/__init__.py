"""The `rknnlaunch` command line: commands imported lazily, errors mapped to exit codes in one place."""
