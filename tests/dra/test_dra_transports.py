"""The API server transports (rknpu_dra_driver.apiserver): the light HTTP transport reads a
kubeconfig and speaks HTTPS with a token; the official client's transport publishes, watches and
prepares. Moved from tests/dra/test_dra_node.py."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from drarig import DRIVER, NODE, DriverRig
from test_dra_node import UID, _three, results


def test_the_official_client_transport_publishes_watches_and_prepares(rig: DriverRig) -> None:
    rig.settings = rig.settings.model_copy(update={"api_client": "kubernetes-client"})
    kubelet = rig.start()
    (name,) = rig.api.wait_slices(_three)
    rig.api.wait_watching()
    rig.api.put_slice(name, lambda s: s["spec"].update(devices=[]))
    rig.api.wait_slices(_three, timeout=5)
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    assert kubelet.prepare([("default", "c", UID)]).claims[UID].error == ""
    missing = str(uuid.uuid4())
    assert "does not exist" in kubelet.prepare([("default", "gone", missing)]).claims[missing].error


def test_the_light_transport_reads_a_kubeconfig(tmp_path: Any) -> None:

    from rknpu_dra_driver.apiserver._transports import light_endpoint

    (tmp_path / "token").write_text("secret\n")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://api.example:6443/base", "insecure-skip-tls-verify": True},
            }
        ],
        "users": [
            {"name": "u", "user": {"tokenFile": "token"}},
            {"name": "x", "user": {"exec": {"command": "aws"}}},
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "u"}},
            {"name": "b", "context": {"cluster": "c", "user": "x"}},
        ],
        "current-context": "a",
    }
    import json

    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    endpoint = light_endpoint(str(path), "", "")
    assert endpoint is not None
    assert (endpoint.scheme, endpoint.host, endpoint.port, endpoint.base_path) == (
        "https",
        "api.example",
        6443,
        "/base",
    )
    assert endpoint.token_file == str(tmp_path / "token")
    config["current-context"] = "b"  # exec credentials: the official client's job
    path.write_text(json.dumps(config))
    assert light_endpoint(str(path), "", "") is None


def test_the_light_transport_speaks_https_with_a_token(tmp_path: Path) -> None:
    import subprocess

    from fakeapi import FakeApiServer

    from rknpu_dra_driver.apiserver._api import KubeApi

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=fake-api",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    api = FakeApiServer(tls=(cert, key)).start()
    try:
        api.add_node(NODE)
        client = KubeApi(str(api.kubeconfig(tmp_path / "kubeconfig")), 5.0)
        client.connect()
        assert client.transport == "light"
        assert (client.get_node(NODE) or {})["metadata"]["name"] == NODE
        assert client.list_slices(NODE, DRIVER) == []
        assert api.authorizations == {"Bearer test-token"}
    finally:
        api.stop()
