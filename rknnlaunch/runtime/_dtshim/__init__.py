"""Holds the sitecustomize.py that `rknnlaunch run` puts on PYTHONPATH (see rknnlaunch/_dtcompat.py)."""
