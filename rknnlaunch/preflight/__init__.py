"""The preflight: checks that a container is ready to run a model on its NPU cores, and why not."""
