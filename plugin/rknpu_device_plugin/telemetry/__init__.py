"""Telemetry: metrics (event sink, NPU/pod collector, HTTP page), NFD features, rknpu-exporter."""
