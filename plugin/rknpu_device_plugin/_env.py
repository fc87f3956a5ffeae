"""The plugin's environment prefix (``RKNPU_PLUGIN_*``): its settings and its NPU discovery both name it."""

ENV_PREFIX = "RKNPU_PLUGIN_"
