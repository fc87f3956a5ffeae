"""Running models: the RKNNLite seam, NPU and CPU runtimes, `open()`, `Pool`, and the device-tree redirect."""
