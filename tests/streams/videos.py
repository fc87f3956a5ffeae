"""Test videos made at test time by PyAV from a real photo panned across the frame (never committed).

The maker is `rknnlaunch.bench.make_video` (``bench --streams`` makes its clip the same way, from
matplotlib's bundled ``grace_hopper.jpg``); this module keeps the tests' import path."""

from rknnlaunch.bench import make_video

__all__ = ["make_video"]
