"""What this container was given: its settings (injected env) and the NPU allocation they resolve to."""
