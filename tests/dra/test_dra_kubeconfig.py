"""The one kubeconfig reader (rknpu_dra_driver.apiserver): kubectl's colon-separated list merged
as kubectl merges it (the first file naming an entry wins), read the same way by the start-up
checks, the light transport and the API client (issue 31: ``KUBECONFIG=a:b`` passed the checks,
then failed in the API client)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from drarig import DRIVER, NODE
from fakeapi import FakeApiServer

from rknpu_dra_driver._preflight import check_kubeconfig
from rknpu_dra_driver.apiserver import KubeApi, KubeconfigError, light_endpoint, read_kubeconfig


def _write(path: Path, document: dict[str, Any]) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def _cluster(name: str, server: str) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server}}


@pytest.mark.parametrize(
    ("first", "second", "current", "server"),
    [
        # Each file brings its own entries: the merge holds both.
        ({"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": "c"}}]},
         {"clusters": [_cluster("c", "https://second:6443")]}, "a", "https://second:6443"),
        # Both name cluster c: the first file's wins, as kubectl's merge.
        ({"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": "c"}}],
          "clusters": [_cluster("c", "https://first:6443")]},
         {"clusters": [_cluster("c", "https://second:6443")]}, "a", "https://first:6443"),
        # The first current-context wins, a later file's does not replace it.
        ({"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": "c"}}]},
         {"current-context": "b", "clusters": [_cluster("c", "https://second:6443")]},
         "a", "https://second:6443"),
        # No current-context in the first: the second's is taken.
        ({"contexts": [{"name": "b", "context": {"cluster": "c"}}]},
         {"current-context": "b", "clusters": [_cluster("c", "https://second:6443")]},
         "b", "https://second:6443"),
    ],
)  # fmt: skip
def test_a_colon_separated_list_merges_as_kubectl_does(
    tmp_path: Path, first: dict[str, Any], second: dict[str, Any], current: str, server: str
) -> None:
    value = os.pathsep.join([_write(tmp_path / "a.yaml", first), _write(tmp_path / "b.yaml", second)])
    config = read_kubeconfig(value)
    assert config.current_context == current
    context = config.named("context", current)
    assert config.named("cluster", context["cluster"])["server"] == server


def test_a_relative_path_is_relative_to_the_file_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = _write(tmp_path / "one" / "config", {"current-context": "a"})
    second = _write(
        tmp_path / "two" / "config",
        {
            "contexts": [{"name": "a", "context": {"cluster": "c"}}],
            "clusters": [
                {"name": "c", "cluster": {"server": "https://x", "certificate-authority": "ca.crt"}}
            ],
        },
    )
    config = read_kubeconfig(os.pathsep.join([first, second]))
    assert config.path(config.named("cluster", "c"), "certificate-authority") == str(
        tmp_path / "two" / "ca.crt"
    )


def test_an_entry_no_file_defines_is_said(tmp_path: Path) -> None:
    config = read_kubeconfig(_write(tmp_path / "a.yaml", {"current-context": "a"}))
    with pytest.raises(KubeconfigError, match="the kubeconfig has no context 'a'"):
        config.named("context", "a")


def test_kubeconfig_a_colon_b_is_read_by_the_checks_the_light_transport_and_the_client(
    tmp_path: Path, fake_api: FakeApiServer
) -> None:
    whole = json.loads(fake_api.kubeconfig(tmp_path / "whole").read_text())
    first = _write(
        tmp_path / "a.yaml", {"current-context": whole["current-context"], "contexts": whole["contexts"]}
    )
    second = _write(tmp_path / "b.yaml", {"clusters": whole["clusters"], "users": whole["users"]})
    value = os.pathsep.join([first, second])
    check_kubeconfig(value)  # the start-up checks pass ...
    endpoint = light_endpoint(value, "", "")  # ... the light transport reads the same merge ...
    assert endpoint is not None and endpoint.token == "test-token"
    for transport in ("auto", "client"):  # ... and so does each API client
        api = KubeApi(value, 5.0, transport)
        api.check_config()
        api.connect()
        try:
            assert api.transport == ("light" if transport == "auto" else "kubernetes-client")
            assert (api.get_node(NODE) or {})["metadata"]["name"] == NODE
            assert api.list_slices(NODE, DRIVER) == []
        finally:
            api.close()
