"""The kubelet-facing side: our gRPC service, serving, registration, restart supervisor."""
