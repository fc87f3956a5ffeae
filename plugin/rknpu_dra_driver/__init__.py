"""The Rockchip NPU DRA driver (`rknpu-dra-driver`): NPU cores as resource.k8s.io/v1 devices.

It shares discovery, health and the core/mask model with the device plugin
(`rknpu_node`, `rknnlaunch.npu`); only the Kubernetes side is its own.
"""
