"""The servers' bad-input table (issue 27, "one rule for servers"): every long-lived program
(rknpu-device-plugin, its functional probe, rknpu-dra-driver, rknpu-exporter) refuses each bad input
before it binds or registers anything: a non-zero exit (2 for a bad setting), no traceback, one
line naming what was wrong and a ``fix:`` line, well within a timeout (no hang, no zombie server).

Each row runs the real program in a process of its own, forked by tests/serverkit/forkserver.py
(which has loaded only what every install has, so 100 rows take seconds, not minutes), all rows at
once the first time one is asked for. A missing library is simulated the way a ``[plugin]``
install looks to Python: None in ``sys.modules`` for it, so its import fails and its spec is not
found. Permission rows run as ``nobody`` when the tests run as root (root ignores file modes).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dra.fakeapi import FakeApiServer

from fakehost import make_host
from rknnlaunch import RknnLaunchError
from rknpu_serverkit import os_error_with_fix, server_main

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0  # a hang, not a slow machine: a refusal takes well under a second of CPU

PLUGIN = "rknpu_device_plugin"
DRA = "rknpu_dra_driver"
EXPORTER = "rknpu_device_plugin.exporter._exporter"

GOOD_KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {cluster: test, user: test}
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: abc}
"""

KUBECONFIGS = {
    "malformed.yaml": "apiVersion: v1\nclusters: [\n  bad",
    "list.yaml": "- a\n- b\n",
    "empty.yaml": "",
    "garbage.yaml": "\x00\x01\x02 not yaml \x7f",
    "tabs.yaml": "apiVersion: v1\n\tkind: Config\n",
    "no-current.yaml": GOOD_KUBECONFIG.replace("current-context: test\n", ""),
    "unknown-current.yaml": GOOD_KUBECONFIG.replace("current-context: test", "current-context: prod"),
    "no-cluster.yaml": GOOD_KUBECONFIG.replace("{cluster: test,", "{cluster: gone,"),
    "no-server.yaml": GOOD_KUBECONFIG.replace('server: "https://127.0.0.1:6443", ', ""),
    "ftp-server.yaml": GOOD_KUBECONFIG.replace("https://127.0.0.1:6443", "ftp://127.0.0.1"),
    "missing-ca.yaml": GOOD_KUBECONFIG.replace(
        "insecure-skip-tls-verify: true", "certificate-authority: nope/ca.crt"
    ),
    "missing-key.yaml": GOOD_KUBECONFIG.replace(
        "{token: abc}", "{client-certificate: /no/such/cert.pem, client-key: /no/such/key.pem}"
    ),
    "contexts-not-list.yaml": GOOD_KUBECONFIG.replace(
        "contexts:\n- name: test\n  context: {cluster: test, user: test}", "contexts: {test: 1}"
    ),
}


@dataclass(frozen=True)
class Row:
    """One bad input: which program, its flags and environment, what the refusal must say."""

    name: str
    program: str  # PLUGIN, DRA, EXPORTER (the probe is the plugin with probe settings)
    args: tuple[str, ...]
    says: str  # a fragment of the error line
    env: tuple[tuple[str, str], ...] = ()
    block: tuple[str, ...] = ()
    modes_bind: bool = False  # a permission row: file modes must apply to its process, even as root
    other_user: bool = False  # ... and it runs as another user than the files' owner (root)
    code: int = 2
    one_line: bool = True  # nothing logged before the refusal: exactly the error line and its fix
    base_args: bool = True  # the program's good flags first, so only this input is bad
    fix: str = ""  # a fragment of the fix line (a bound: the valid range, and why when stated)
    denied: bool = True  # a modes_bind row refused for its permission (else for another reason)


def P(name: str, *args: str, says: str, **kw: Any) -> Row:
    return Row(name, PLUGIN, args, says, **kw)


def D(name: str, *args: str, says: str, **kw: Any) -> Row:
    return Row(name, DRA, args, says, **kw)


def E(name: str, *args: str, says: str, **kw: Any) -> Row:
    return Row(name, EXPORTER, args, says, **kw)


FINITE = "must be a finite number"
PERMISSION = "Permission denied"
PIP_PLUGIN = "pip install 'rknnlaunch[plugin]'"
PIP_DRA = "pip install 'rknnlaunch[dra]'"
PROBE = ("--probe-interval", "300")
# The DRA driver's good folders, for a row without the base arguments (no --kubeconfig).
DRA_FOLDERS = ("--registration-dir", "{base}/reg", "--plugin-dir", "{base}/plug", "--cdi-dir", "{base}/cdi")

ROWS: list[Row] = [
    # --- rknpu-device-plugin -------------------------------------------------------------------
    P(
        "plugin-host-root-file",
        "--host-root",
        "/etc/hostname",
        says="--host-root /etc/hostname is not a folder",
    ),
    P("plugin-host-root-missing", "--host-root", "{base}/no/such/root", says="does not exist"),
    P("plugin-host-root-unreadable", "--host-root", "{base}/noread", says=PERMISSION, modes_bind=True),
    P("plugin-health-nan", "--health-interval", "nan", says=FINITE),
    P("plugin-health-inf", "--health-interval", "inf", says=FINITE),
    P("plugin-health-huge", "--health-interval", "1e400", says=FINITE),
    P("plugin-health-negative", "--health-interval", "-1", says="greater than 0"),
    P(
        "plugin-health-too-long",
        "--health-interval",
        "301",
        says="less than or equal to 300",
        fix="fix: use --health-interval above 0 and at most 300",
    ),
    P("plugin-health-word", "--health-interval", "soon", says="invalid float value"),
    P(
        "plugin-replicas-huge",
        "--mode",
        "shared",
        "--replicas",
        "99999999999999999999",
        says="less than or equal to 64",
        fix="fix: use --replicas between 1 and 64",
    ),
    P(
        "plugin-replicas-zero",
        "--mode",
        "shared",
        "--replicas",
        "0",
        says="greater than or equal to 1",
        fix="fix: use --replicas between 1 and 64",
    ),
    P("plugin-replicas-not-shared", "--replicas", "2", says="replicas only apply to --mode shared"),
    P("plugin-mode-enum", "--mode", "sideways", says="invalid choice"),
    P("plugin-log-level-enum", "--log-level", "loud", says="invalid choice"),
    P("plugin-env-log-format", says="RKNPU_PLUGIN_LOG_FORMAT", env=(("RKNPU_PLUGIN_LOG_FORMAT", "xml"),)),
    P("plugin-env-health-nan", says=FINITE, env=(("RKNPU_PLUGIN_HEALTH_INTERVAL", "nan"),)),
    P("plugin-env-replicas-word", says="RKNPU_PLUGIN_REPLICAS", env=(("RKNPU_PLUGIN_REPLICAS", "two"),)),
    P("plugin-env-inotify-maybe", says="must be true or false", env=(("RKNPU_PLUGIN_INOTIFY", "maybe"),)),
    P(
        "plugin-env-unknown-extra-device",
        says="not a device node path",
        env=(("RKNPU_PLUGIN_EXTRA_DEVICE", "/tmp/x"),),
    ),
    P("plugin-dir-is-file", "--device-plugin-dir", "{base}/afile", says="is a file, not a folder"),
    P("plugin-dir-under-file", "--device-plugin-dir", "{base}/afile/sub", says="is a file, not a folder"),
    P(
        "plugin-dir-not-writable",
        "--device-plugin-dir",
        "{base}/rootonly",
        says=PERMISSION,
        modes_bind=True,
    ),
    # The kubelet's folder is never created (issue 32): a typo, or no kubelet on the node.
    P(
        "plugin-dir-missing",
        "--device-plugin-dir",
        "{base}/missing/dp",
        says="{base}/missing/dp: no such folder",
    ),
    P(
        "plugin-default-kubelet-dir-as-user",
        "--host-root",
        "{base}/host",
        says="--device-plugin-dir /var/lib/kubelet/device-plugins: ",
        modes_bind=True,
        other_user=True,
        base_args=False,
        # Where no kubelet ever ran, the folder is missing, and that is the refusal.
        denied=Path("/var/lib/kubelet/device-plugins").is_dir(),
    ),
    P("plugin-cdi-dir-file", "--cdi", "--cdi-dir", "{base}/afile", says="--cdi-dir"),
    P("plugin-nfd-dir-file", "--nfd-dir", "{base}/afile/features.d", says="--nfd-dir"),
    P("plugin-metrics-not-address", "--metrics-address", "here:port", says="is not host:port"),
    P("plugin-metrics-port-range", "--metrics-address", ":99999", says="is not host:port"),
    P(
        "plugin-metrics-no-prometheus",
        "--metrics-address",
        ":0",
        says="prometheus_client",
        block=("prometheus_client",),
    ),
    P("plugin-no-grpc", says=PIP_PLUGIN, block=("grpc",)),
    P("plugin-no-protobuf", says="google.protobuf", block=("google.protobuf",)),
    P("plugin-no-inotify", says="inotify_simple", block=("inotify_simple",)),
    P("plugin-soc-enum", "--soc", "rk9999", says="unknown SoC"),
    P("plugin-extra-device-not-dev", "--extra-device", "/etc/passwd", says="not a device node path"),
    P("plugin-resource-name", "--resource-name", "not a name", says="extended resource name"),
    P("plugin-socket-name", "--socket-name", "kubelet.sock", says="must be a plain file name"),
    P("plugin-host-librknnrt-relative", "--host-librknnrt", "lib/librknnrt.so", says="absolute host path"),
    P("plugin-unknown-flag", "--frobnicate", says="unrecognized arguments"),
    # --- the plugin's functional probe (images/plugin-probe, samples/plugin-probe) ------------
    P("probe-model-missing", "--probe-model", "{base}/missing.rknn", *PROBE, says="does not exist"),
    P("probe-model-folder", "--probe-model", "{base}/adir.rknn", *PROBE, says="is a folder, not a file"),
    P(
        "probe-model-unreadable",
        "--probe-model",
        "{base}/secret.rknn",
        *PROBE,
        says=PERMISSION,
        modes_bind=True,
    ),
    P(
        "probe-model-soc-folder-missing",
        "--probe-model",
        "{base}/none/probe-{{soc}}.rknn",
        says="does not exist",
    ),
    P("probe-model-not-rknn", "--probe-model", "{base}/model.onnx", says="must name an .rknn model"),
    P("probe-interval-nan", "--probe-model", "{base}/probe.rknn", "--probe-interval", "nan", says=FINITE),
    P(
        "probe-interval-zero",
        "--probe-model",
        "{base}/probe.rknn",
        "--probe-interval",
        "0",
        says="greater than 0",
    ),
    P(
        "probe-timeout-huge",
        "--probe-model",
        "{base}/probe.rknn",
        "--probe-timeout",
        "1e9",
        says="less than or equal",
    ),
    P(
        "probe-env-timeout-minus-inf",
        "--probe-model",
        "{base}/probe.rknn",
        says=FINITE,
        env=(("RKNPU_PLUGIN_PROBE_TIMEOUT", "-inf"),),
    ),
    P(
        "probe-env-model-missing",
        says="does not exist",
        env=(("RKNPU_PLUGIN_PROBE_MODEL", "/opt/none/p.rknn"),),
    ),
    # --- rknpu-dra-driver -----------------------------------------------------------------------
    *[
        D(
            f"dra-kubeconfig-{name.removesuffix('.yaml')}",
            "--kubeconfig",
            f"{{base}}/{name}",
            says="--kubeconfig",
        )
        for name in KUBECONFIGS
    ],
    D("dra-kubeconfig-missing", "--kubeconfig", "{base}/nope.yaml", says="does not exist"),
    # Passes every start-up check, then the client cannot be built (its certificate is not base64):
    # the API client's thread fails after the sockets are up, and the driver stops (exit 1), not a
    # zombie serving without an API.
    D(
        "dra-api-client-fails-after-start",
        "--kubeconfig",
        "{base}/bad-cert.yaml",
        says="cannot configure the API client",
        code=1,
        one_line=False,
    ),
    # A reachable API server without resource.k8s.io/v1 (the fake as Kubernetes 1.33): retrying
    # cannot help, so the first publish stops the driver (exit 1) instead of retrying 404s forever.
    D(
        "dra-kubernetes-1.33",
        "--kubeconfig",
        "{base}/k8s-1.33.yaml",
        says="needs Kubernetes 1.34+ (resource.k8s.io/v1); this API server is 1.33",
        code=1,
        one_line=False,
    ),
    # The explicit partitionable layout on a server that drops its fields (DRAPartitionableDevices
    # off): no fallback and nothing stored; the first publish stops the driver (exit 1).
    D(
        "dra-partitionable-gate-off",
        "--kubeconfig",
        "{base}/gate-off.yaml",
        "--slice-layout",
        "partitionable",
        says="the DRAPartitionableDevices feature gate is off on this API server",
        code=1,
        one_line=False,
    ),
    D("dra-kubeconfig-folder", "--kubeconfig", "{base}", says="is a folder, not a file"),
    D(
        "dra-kubeconfig-unreadable",
        "--kubeconfig",
        "{base}/secret.yaml",
        says="secret.yaml: Permission denied",
        modes_bind=True,
    ),
    D(
        "dra-env-kubeconfig-list-with-missing",
        *DRA_FOLDERS,
        says="does not exist",
        env=(("KUBECONFIG", "{base}/good.yaml:{base}/gone.yaml"),),
        base_args=False,
    ),
    D(
        "dra-no-kubeconfig-not-in-cluster",
        *DRA_FOLDERS,
        says="no kubeconfig and not in a cluster",
        base_args=False,
    ),
    D(
        "dra-in-cluster-without-token",
        *DRA_FOLDERS,
        says="service account token",
        env=(("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")),
        base_args=False,
    ),
    D("dra-no-kubernetes-client", says=PIP_DRA, block=("kubernetes",)),
    D("dra-no-yaml", says="yaml", block=("yaml",)),
    D("dra-no-grpc", says=PIP_DRA, block=("grpc",)),
    D("dra-host-root-file", "--host-root", "/etc/hostname", says="is not a folder"),
    D("dra-host-root-missing", "--host-root", "{base}/gone", says="does not exist"),
    D("dra-health-nan", "--health-interval", "nan", says=FINITE),
    D("dra-api-timeout-inf", "--api-timeout", "inf", says=FINITE),
    D("dra-api-timeout-zero", "--api-timeout", "0", says="greater than 0"),
    D(
        "dra-api-timeout-huge",
        "--api-timeout",
        "1e12",
        says="less than or equal to 60",
        fix="fix: use --api-timeout above 0 and at most 60",
    ),
    D(
        "dra-max-shares-zero",
        "--max-shares",
        "0",
        says="greater than or equal to 2",
        fix="fix: use --max-shares between 2 and 64",
    ),
    D("dra-driver-name", "--driver-name", "Bad_Name", says="DNS subdomain"),
    D("dra-node-name-upper", "--node-name", "NODE-A", says="not a Kubernetes node name"),
    D("dra-node-name-missing", says="no node name", env=(("NODE_NAME", ""),)),
    D("dra-registration-dir-file", "--registration-dir", "{base}/afile", says="--registration-dir"),
    D(
        "dra-plugin-dir-not-writable",
        "--plugin-dir",
        "{base}/rootonly",
        says="--plugin-dir {base}/rootonly: Permission denied",
        modes_bind=True,
    ),
    D("dra-plugin-dir-missing", "--plugin-dir", "{base}/missing/p", says="{base}/missing/p: no such folder"),
    D(
        "dra-registration-dir-missing",
        "--registration-dir",
        "{base}/missing/reg",
        says="--registration-dir {base}/missing/reg: no such folder",
    ),
    D("dra-cdi-dir-under-file", "--cdi-dir", "{base}/afile/cdi", says="--cdi-dir"),
    D("dra-env-log-level", says="RKNPU_DRA_LOG_LEVEL", env=(("RKNPU_DRA_LOG_LEVEL", "verbose"),)),
    D("dra-env-health-huge", says=FINITE, env=(("RKNPU_DRA_HEALTH_INTERVAL", "1e999"),)),
    D("dra-extra-device", "--extra-device", "/dev/../etc/shadow", says="not a device node path"),
    # --- rknpu-exporter -------------------------------------------------------------------------
    E("exporter-host-root-file", "--host-root", "/etc/hostname", says="is not a folder"),
    E("exporter-host-root-missing", "--host-root", "{base}/gone", says="does not exist"),
    E("exporter-interval-nan", "--interval", "nan", says=FINITE),
    E("exporter-interval-huge", "--interval", "1e400", says=FINITE),
    E("exporter-interval-negative", "--interval", "-5", says="greater than 0"),
    E(
        "exporter-expiry-negative",
        "--nfd-expiry",
        "-1",
        says="greater than or equal to 0",
        fix="fix: use --nfd-expiry between 0 and 31622400 (at most 366 days because",
    ),
    # 1e14 s and 1e300 s overflowed datetime while writing the expiry time: a traceback.
    *[
        E(
            f"exporter-expiry-{value}",
            "--nfd-expiry",
            value,
            says="less than or equal to 31622400",
            fix="fix: use --nfd-expiry between 0 and 31622400 (at most 366 days because",
        )
        for value in ("1e14", "1e300")
    ],
    E("exporter-expiry-nan", "--nfd-expiry", "nan", says=FINITE),
    E("exporter-nothing-to-do", says="nothing to do", base_args=False),
    E("exporter-once-and-metrics", "--metrics-address", ":9102", says="cannot serve --metrics-address"),
    E("exporter-metrics-bogus", "--metrics-address", "a:b:c", says="is not host:port", base_args=False),
    E("exporter-nfd-dir-file", "--nfd-dir", "{base}/afile", says="is a file, not a folder"),
    E("exporter-textfile-under-file", "--textfile-dir", "{base}/afile/x", says="--textfile-dir"),
    E(
        "exporter-textfile-parent-missing",
        "--textfile-dir",
        "{base}/missing/node-exporter/textfile",
        says="its parent {base}/missing/node-exporter does not exist",
    ),
    E("exporter-nfd-not-writable", "--nfd-dir", "{base}/rootonly/nfd", says=PERMISSION, modes_bind=True),
    E("exporter-no-prometheus", says=PIP_PLUGIN, block=("prometheus_client",)),
    E(
        "exporter-no-grpc-for-attribution",
        "--host-root",
        "{base}/host",
        "--metrics-address",
        "127.0.0.1:0",
        says="grpc",
        block=("grpc",),
        base_args=False,
    ),
    E("exporter-soc-enum", "--soc", "nope", says="unknown SoC"),
    # No NPU with --once: a failure (exit 1) said once, as the error line (it was a WARNING, then
    # the same text again as the ERROR).
    E(
        "exporter-once-no-npu",
        "--host-root",
        "{base}/nonpu",
        "--once",
        "--nfd-dir",
        "{base}/nfd",
        says="no Rockchip NPU found",
        code=1,
        one_line=False,
        base_args=False,
    ),
    E(
        "exporter-env-interval-word",
        says="RKNPU_EXPORTER_INTERVAL",
        env=(("RKNPU_EXPORTER_INTERVAL", "abc"),),
    ),
    E(
        "exporter-env-once-perhaps",
        "--nfd-dir",
        "{base}/nfd",
        says="must be true or false",
        env=(("RKNPU_EXPORTER_ONCE", "perhaps"),),
        base_args=False,
    ),
    E("exporter-log-format-enum", "--log-format", "yaml", says="invalid choice"),
    E(
        "exporter-metrics-port-in-use",
        "--host-root",
        "{base}/host",
        "--metrics-address",
        "127.0.0.1:{busy_port}",
        says="pick a free port",
        base_args=False,
        one_line=False,  # the first discovery logs its NPU before the port is bound
    ),
]


def _base_args(program: str) -> tuple[str, ...]:
    if program == PLUGIN:
        return ("--host-root", "{base}/host", "--device-plugin-dir", "{base}/dp")
    if program == DRA:
        return (
            "--host-root",
            "{base}/host",
            "--kubeconfig",
            "{base}/good.yaml",
            "--registration-dir",
            "{base}/reg",
            "--plugin-dir",
            "{base}/plug",
            "--cdi-dir",
            "{base}/cdi",
        )
    return ("--host-root", "{base}/host", "--once", "--nfd-dir", "{base}/nfd")


@dataclass
class Result:
    code: int | None
    stderr: str
    seconds: float  # wall time, all rows running at once
    cpu_seconds: float = 0.0


@dataclass
class Table:
    base: Path
    busy_port: int
    results: dict[str, Result] = field(default_factory=dict)


def _request(row: Row, table: Table, index: int) -> dict[str, Any]:
    """The fork server's request for ``row``: the program as ``python -m`` would run it."""
    fill = {"base": str(table.base), "busy_port": str(table.busy_port)}
    args = [*(_base_args(row.program) if row.base_args else ()), *row.args]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RKNPU_", "RKNN_", "KUBERNETES_")) and key not in ("KUBECONFIG", "NODE_NAME")
    }
    env["NODE_NAME"] = "node-a"
    env.update({key: value.format(**fill) for key, value in row.env})
    # Root ignores file modes: a permission row's child drops that override (tests/filemodes.py);
    # the fixture's modes deny even the owner, so it is refused as root and as a plain user alike.
    return {
        "id": index,
        "module": row.program,
        "args": [a.format(**fill) for a in args],
        "env": env,
        "block": list(row.block),
        "modes_bind": ("other-user" if row.other_user else "owner") if row.modes_bind else None,
        "stderr": str(table.base / "stderr" / f"{index}.txt"),
        "timeout": TIMEOUT_S,
    }


def _run_all(table: Table) -> None:
    """Every row at once through the fork server (tests/serverkit/forkserver.py)."""
    (table.base / "stderr").mkdir()
    requests = [_request(row, table, index) for index, row in enumerate(ROWS)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "plugin"), str(REPO / "tests"), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
        input="".join(json.dumps(request) + "\n" for request in requests),
        capture_output=True,
        text=True,
        timeout=600,  # every row at once, MAX_CHILDREN at a time, on a machine as loaded as CI's
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        row = ROWS[answer["id"]]
        err = (table.base / "stderr" / f"{answer['id']}.txt").read_text(errors="replace")
        table.results[row.name] = Result(answer["code"], err, answer["seconds"], answer["cpu_seconds"])


def _build_base(base: Path) -> None:
    make_host("rk3588-drm", base / "host")
    (base / "afile").write_text("a file where a folder belongs\n")
    (base / "nonpu").mkdir()  # a host with no NPU
    (base / "adir.rknn").mkdir()
    (base / "probe.rknn").write_bytes(b"RKNN")
    (base / "model.onnx").write_bytes(b"onnx")
    (base / "good.yaml").write_text(GOOD_KUBECONFIG)
    (base / "bad-cert.yaml").write_text(
        GOOD_KUBECONFIG.replace(
            "{token: abc}", "{client-certificate-data: '!!notbase64', client-key-data: '%%'}"
        )
    )
    for name, text in KUBECONFIGS.items():
        (base / name).write_text(text)
    for name in ("secret.rknn", "secret.yaml"):
        (base / name).write_text(GOOD_KUBECONFIG)
        (base / name).chmod(0)
    for name in ("dp", "reg", "plug", "cdi", "nfd"):  # the good folders: writable for a permission row
        (base / name).mkdir()
        (base / name).chmod(0o777)
    (base / "noread").mkdir()
    (base / "noread").chmod(0)
    (base / "rootonly").mkdir()
    (base / "rootonly").chmod(0o555)  # not writable by its owner either (for a non-root run)
    # The fake host readable by another user (an other_user row's process is nobody).
    for path in [base, *(base / "host").rglob("*")]:
        if not path.is_symlink():
            extra = stat.S_IRGRP | stat.S_IROTH | (stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0)
            path.chmod(path.stat().st_mode | extra)
    (base / "host").chmod(0o755)


@pytest.fixture(scope="module")
def table() -> Iterator[Table]:
    base = Path(tempfile.mkdtemp(prefix="rknpu-bad-inputs-"))
    busy = socket.socket()
    old_server = FakeApiServer(minor=33).start()
    gate_off = FakeApiServer(drop_fields=("sharedCounters", "consumesCounters"), minor=35).start()
    try:
        _build_base(base)
        old_server.kubeconfig(base / "k8s-1.33.yaml")
        gate_off.kubeconfig(base / "gate-off.yaml")
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = Table(base, busy.getsockname()[1])
        _run_all(result)
        yield result
    finally:
        busy.close()
        old_server.stop()
        gate_off.stop()
        for path in (base / "noread", base / "rootonly"):
            with contextlib.suppress(OSError):
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_the_table_is_big_and_names_are_unique() -> None:
    assert len({row.name for row in ROWS}) == len(ROWS)
    assert len(ROWS) >= 50
    assert {row.program for row in ROWS} == {PLUGIN, DRA, EXPORTER}
    assert any("--probe-model" in row.args or dict(row.env).get("RKNPU_PLUGIN_PROBE_MODEL") for row in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_a_bad_input_is_one_line_and_a_fix_before_anything_starts(row: Row, table: Table) -> None:
    result = table.results[row.name]
    err = result.stderr
    assert result.code is not None, f"no exit within {TIMEOUT_S} s (a hang or a zombie server):\n{err}"
    assert "Traceback" not in err, err
    assert result.code == row.code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert any(line.strip().startswith("fix:") or "| fix:" in line or "fix: " in line for line in lines), err
    assert row.says.format(base=table.base) in err, err
    if row.fix:
        assert any(line.strip().startswith(row.fix) for line in lines), err
    if row.modes_bind and row.denied:  # the "Permission denied: /var/lib/kubelet/..." had no fix line
        assert "Permission denied" in err and "fix: run the server as root" in err, err
    if row.one_line:
        assert len(lines) == 2, err
        assert lines[0].startswith(f"{_prog(row.program)}: error: "), err
        assert lines[1].startswith("  fix: "), err


def test_a_missing_kubelet_folder_is_never_created(table: Table) -> None:
    """Every "missing" row above named a folder under {base}/missing: none of them made it."""
    assert {"plugin-dir-missing", "dra-plugin-dir-missing", "exporter-textfile-parent-missing"} <= set(
        table.results
    )
    assert not (table.base / "missing").exists()


def test_the_exporter_says_a_missing_npu_once(table: Table) -> None:
    err = table.results["exporter-once-no-npu"].stderr
    assert err.count("no Rockchip NPU found") == 1, err
    assert "WARNING" not in err, err


@pytest.mark.parametrize("program", [PLUGIN, DRA, EXPORTER])
def test_help_shows_each_default_once_and_never_pydantic_internals(program: str) -> None:
    import importlib

    module = importlib.import_module(
        {PLUGIN: "rknpu_device_plugin._settings", DRA: "rknpu_dra_driver._settings", EXPORTER: program}[
            program
        ]
    )
    text = module.build_parser().format_help()
    flat = " ".join(text.split())
    assert "PydanticUndefined" not in flat
    assert flat.count("(default:") == flat.count("(default: ") and "default: None" not in flat
    for chunk in flat.split(" --")[1:]:  # one option's help
        assert chunk.count("default:") <= 1, chunk
    if program == DRA:
        assert "(default: $NODE_NAME) (env RKNPU_DRA_NODE_NAME)" in flat


def test_refusals_are_fast(table: Table) -> None:
    """A refusal needs no NPU scan, no API client, no socket. Wall time says how loaded the machine
    is (a row of 0.5 s of CPU took 21 s on a loaded 2-core machine): it only bounds a hang; CPU is
    the figure."""
    slowest = max(table.results.items(), key=lambda item: item[1].seconds)
    assert slowest[1].seconds < TIMEOUT_S, slowest
    # CPU, which the machine's load does not inflate: a refusal costs a fraction of a second.
    hungriest = max(table.results.items(), key=lambda item: item[1].cpu_seconds)
    assert hungriest[1].cpu_seconds < 1.0, hungriest


def _prog(program: str) -> str:
    return {PLUGIN: "rknpu-device-plugin", DRA: "rknpu-dra-driver", EXPORTER: "rknpu-exporter"}[program]


# --- in-process: what the table cannot reach from the command line -------------------------------


def test_a_permission_error_met_while_serving_gets_the_fix_line(capsys: pytest.CaptureFixture[str]) -> None:
    def run(settings: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", "/var/lib/kubelet/device-plugins/x.sock")

    code = server_main(
        [],
        prog="srv",
        logger_name="srv-test",
        build_parser=lambda: __import__("argparse").ArgumentParser(),
        settings_from=lambda args: type("S", (), {"log_format": "text", "log_level": "info"})(),
        setup_logging=lambda fmt, level: lambda: None,
        run=run,  # type: ignore[arg-type]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "srv: error: Permission denied: /var/lib/kubelet/device-plugins/x.sock"
    assert err.splitlines()[1].startswith("  fix: run the server as root")


def test_os_error_fixes_name_the_cause() -> None:
    busy = os_error_with_fix(OSError(errno.EADDRINUSE, "Address already in use"))
    assert isinstance(busy, RknnLaunchError) and busy.fix is not None and "another port" in busy.fix
    read_only = os_error_with_fix(OSError(errno.EROFS, "Read-only file system", "/var/run/cdi/x.json"))
    assert read_only is not None and read_only.fix is not None and "read-write" in read_only.fix
    assert os_error_with_fix(OSError(errno.ENOENT, "No such file or directory")) is None


def test_a_second_stop_signal_is_not_said_twice() -> None:
    from rknpu_serverkit import StopEvent, stop_on_signals

    said: list[int] = []
    stop = StopEvent()
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    import signal

    with stop_on_signals(stop, said.append):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
    stop.close()
    assert said == [signal.SIGTERM]
