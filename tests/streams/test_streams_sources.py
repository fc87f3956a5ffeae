"""Sources before any decoding: names, masking, credentials from the environment and netrc files,
duplicates, rates, missing files (rknnlaunch.streams._sources)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rknnlaunch import UsageError
from rknnlaunch.streams import (
    Redactor,
    Source,
    add_credentials,
    default_name,
    expand_environment,
    mask_url,
    plan_sources,
    read_credentials,
)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("rtsp://admin:secret@cam/live", "rtsp://admin:***@cam/live"),
        ("rtsps://admin:s%40cret@cam:322/a/b?x=1", "rtsps://admin:***@cam:322/a/b?x=1"),
        ("rtsp://admin@cam/live", "rtsp://admin@cam/live"),
        ("rtsp://cam/live", "rtsp://cam/live"),
        ("http://u:p@[::1]:8080/v.mjpg", "http://u:***@[::1]:8080/v.mjpg"),
        ("/videos/a.mp4", "/videos/a.mp4"),
        ("rtsp://a:b:c@cam/x", "rtsp://a:***@cam/x"),
    ],
)
def test_mask_url_hides_the_password_only(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_redactor_masks_urls_and_bare_passwords_in_ffmpeg_texts() -> None:
    redact = Redactor()
    redact.add_url("rtsp://admin:s%40cret@cam/live")
    text = "Server returned 401: 'rtsp://admin:s%40cret@cam/live' (password s@cret)"
    assert redact(text) == "Server returned 401: 'rtsp://admin:***@cam/live' (password ***)"


def test_a_source_never_shows_its_password() -> None:
    source = Source("rtsp://admin:secret@cam/live", name="door", rate=5)
    assert "secret" not in repr(source) and "secret" not in str(source)
    assert source.shown == "rtsp://admin:***@cam/live" and source.kind == "rtsp" and source.is_live


@pytest.mark.parametrize("rate", [0, -1, math.nan, math.inf])
def test_a_rate_that_is_no_rate_is_a_usage_error_naming_the_source(rate: float) -> None:
    with pytest.raises(
        UsageError, match=r"source rtsp://a:\*\*\*@cam/x: rate .* is not a number of frames a second"
    ):
        Source("rtsp://a:pw@cam/x", rate=rate)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/v/yard.mp4", "yard"),
        ("file:///v/gate.mkv", "gate"),
        ("rtsp://admin:pw@door.local:554/stream1", "door.local-stream1"),
        ("http://cam", "cam"),
        ("/dev/video2", "video2"),
        ("v4l2:///dev/video0", "video0"),
    ],
)
def test_default_names(url: str, name: str) -> None:
    assert default_name(url) == name


def test_environment_references_are_expanded_and_encoded_in_the_credentials() -> None:
    env = {"CAM_PASSWORD": "p@ss:w/rd", "HOST": "cam.local"}
    url = expand_environment("rtsp://admin:${CAM_PASSWORD}@${HOST}/live", env)
    assert url == "rtsp://admin:p%40ss%3Aw%2Frd@cam.local/live"
    with pytest.raises(UsageError, match=r"\$\{NOPE\} is not set") as raised:
        expand_environment("rtsp://admin:${NOPE}@cam/live", env)
    assert raised.value.fix is not None and "export NOPE" in raised.value.fix


def test_netrc_credentials_fill_urls_that_carry_none(tmp_path: Path) -> None:
    path = tmp_path / "cameras"
    path.write_text(
        "machine door.local login admin password s3cret\nmachine yard login viewer password p@ss\n"
    )
    found = read_credentials(path)
    assert found == {"door.local": ("admin", "s3cret"), "yard": ("viewer", "p@ss")}
    assert add_credentials("rtsp://door.local/live", found) == "rtsp://admin:s3cret@door.local/live"
    assert add_credentials("rtsp://yard:554/a", found) == "rtsp://viewer:p%40ss@yard:554/a"
    assert add_credentials("rtsp://other:x@door.local/live", found) == "rtsp://other:x@door.local/live"
    assert add_credentials("door.local.mp4", found) == "door.local.mp4"


def test_a_bad_credentials_file_is_named_never_shown(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        read_credentials(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("machine door login admin password secret extra-word-not-netrc\n")
    with pytest.raises(UsageError) as raised:
        read_credentials(bad)
    assert "secret" not in str(raised.value) and "netrc format" in str(raised.value)


def test_plan_checks_everything_that_needs_no_decoding(tmp_path: Path) -> None:
    clip = tmp_path / "yard.mp4"
    clip.write_bytes(b"\0" * 16)
    folder = tmp_path / "folder.mp4"
    folder.mkdir()
    planned = plan_sources(
        [
            Source(str(clip)),
            Source(str(clip)),
            Source("rtsp://admin:${PW}@door/live", name="door"),
            Source("rtsp://cam2/live", name="door"),
            Source(str(tmp_path / "missing.mp4")),
            Source(str(folder)),
            Source("gopher://x/y"),
            Source("rtsp://admin:${UNSET}@gate/live"),
        ],
        environ={"PW": "pw"},
    )
    by_name = {p.name: p for p in planned}
    assert [p.name for p in planned] == [
        "yard",
        "yard-2",
        "door",
        "door",
        "missing",
        "folder",
        "x-y",
        "gate-live",
    ]
    assert by_name["yard"].problem is None
    assert planned[1].problem is not None and "given twice (already watched as 'yard')" in planned[1].problem
    # one video as two streams on purpose: each has its own name
    on_purpose = plan_sources([Source(str(clip), name="a"), Source(str(clip), name="b")])
    assert [p.problem for p in on_purpose] == [None, None]
    assert planned[2].problem is None and planned[2].url == "rtsp://admin:pw@door/live"
    assert planned[3].problem == "stream name 'door' is given twice (rtsp://cam2/live)"
    assert planned[4].problem is not None and planned[4].problem.endswith("missing.mp4: no such file")
    assert planned[5].problem is not None and "is a folder" in planned[5].problem
    assert planned[6].problem is not None and "unknown scheme gopher://" in planned[6].problem
    assert planned[7].problem is not None and "${UNSET} is not set" in planned[7].problem
