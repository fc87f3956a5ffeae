"""Device logic: NPU discovery on the node, device IDs, allocation policy, health (no gRPC here)."""
