"""images/plugin-probe: the probe variant ships a model for every SoC, the runtime image's librknnrt
pins, and points the plugin at its models; the models come from our own graph only."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from rknnlaunch.npu import SOCS
from rknpu_device_plugin._settings import parse_settings

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "images" / "plugin-probe" / "Dockerfile"
RUNTIME = REPO / "images" / "runtime" / "Dockerfile"


def _args(dockerfile: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, value in re.findall(r"^ARG (\w+)=(\S*)", dockerfile.read_text(), re.MULTILINE):
        found.setdefault(name, set()).add(value)
    return found


def test_probe_image_uses_the_runtime_images_librknnrt_pins() -> None:
    probe, runtime = _args(PROBE), _args(RUNTIME)
    for pin in ("RKNNRT_VERSION", "RKNNRT_SHA256"):
        assert probe[pin] == runtime[pin], f"{pin} differs between the probe and runtime images"


def test_every_soc_gets_a_probe_model_where_the_plugin_looks() -> None:
    text = PROBE.read_text()
    template = re.search(r"RKNPU_PLUGIN_PROBE_MODEL=(\S+)", text)
    assert template is not None
    spec = importlib.util.spec_from_file_location(
        "make_probe_model", REPO / "images/probe/make_probe_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = {name for names in module.TARGETS.values() for name in names}
    assert built == {soc.name for soc in SOCS}
    settings = parse_settings(["--probe-model", template.group(1)])
    for soc in SOCS:
        path = settings.resolved_probe_model(soc.name)
        assert path is not None and path.parent == Path("/opt/rknpu-probe")
        assert path.name == f"probe-{soc.name}.rknn"
        assert f"probe-{soc.name}.rknn" in text or soc.name in " ".join(
            re.findall(r"for soc in ([^;]+);", text)
        )


def test_probe_image_installs_through_the_one_script() -> None:
    text = PROBE.read_text()
    assert "sh /src/images/install-python.sh plugin-probe /src" in text
    install = (REPO / "images" / "install-python.sh").read_text()
    assert "plugin-probe) extras=plugin,npu" in install
    assert 'ENTRYPOINT ["rknpu-device-plugin"]' in text


def test_probe_overlay_gives_the_probe_what_it_needs() -> None:
    yaml = __import__("pytest").importorskip("yaml")
    kustomization = yaml.safe_load((REPO / "samples" / "plugin-probe" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../deploy"]
    assert kustomization["images"][0]["newName"].endswith("rknpu-device-plugin-probe")
    patch = yaml.safe_load(kustomization["patches"][0]["patch"])
    container = patch["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is True  # opens the NPU's nodes
    assert any(mount["mountPath"] == "/tmp" for mount in container["volumeMounts"])
    memory = container["resources"]["limits"]["memory"]
    assert memory.endswith("Mi") and int(memory[:-2]) >= 256
