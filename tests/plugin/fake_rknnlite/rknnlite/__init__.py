"""Test stand-in for rknn-toolkit-lite2's `rknnlite` package, put on the probe child's PYTHONPATH."""
