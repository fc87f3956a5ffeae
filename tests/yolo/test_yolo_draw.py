"""Drawing results of each task: boxes, rotated boxes, masks and keypoints land where they should."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rknnlaunch.yolo import Detections, draw_detections, geometry, image_masks, make_decoder
from rknnlaunch.yolo.testing import SynthObject, encode_ultralytics

pytest.importorskip("cv2")


def test_detect_and_names_from_metadata() -> None:
    found = Detections(
        np.array([[10, 10, 60, 60]], np.float32),
        np.array([0.9], np.float32),
        np.array([1]),
        names=("a", "cat"),
    )
    canvas = draw_detections(np.zeros((100, 100, 3), np.uint8), found)
    assert canvas[35, 10].any() and not canvas[35, 35].any()  # box edge drawn, inside untouched
    assert found.to_json()["detections"][0]["name"] == "cat"


def test_obb_draws_the_rotated_polygon() -> None:
    found = Detections(
        np.array([[30, 45, 70, 55]], np.float32),
        np.array([0.9], np.float32),
        np.array([0]),
        angles=np.array([math.pi / 2], np.float32),
    )
    canvas = draw_detections(np.zeros((100, 100, 3), np.uint8), found)
    assert canvas[30, 50].any()  # rotated 90 degrees: the short side is now at the top (y = 30)
    assert not canvas[50, 30].any()  # the unrotated box's left edge is not drawn


def test_masks_map_from_proto_resolution_onto_the_image() -> None:
    protos = np.full((32, 160, 160), -1.0, np.float32)
    protos[0] = 1.0  # coefficient 1 on channel 0: the mask is the whole box
    coef = tuple([1.0] + [0.0] * 31)
    obj = SynthObject((200.0, 240.0, 400.0, 400.0), 0, 0.9, coefficients=coef)
    outputs = [*encode_ultralytics([obj], task="segment"), protos[None]]
    info = geometry(1280, 720, 640, 640)  # scale 0.5, 140 px pad
    found = make_decoder([o.shape for o in outputs])(outputs, info)
    full = image_masks(found, 1280, 720)
    ys, xs = np.nonzero(full[0])
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == pytest.approx((400, 799, 200, 519), abs=8)
    canvas = draw_detections(np.zeros((720, 1280, 3), np.uint8), found)
    assert canvas[360, 600].any() and not canvas[360, 1000].any()


def test_keypoints_and_skeleton() -> None:
    points = np.zeros((1, 17, 3), np.float32)
    points[0, :, 0] = np.linspace(20, 80, 17)
    points[0, :, 1] = 50
    points[0, :, 2] = 1.0
    points[0, 0, 2] = 0.1  # nose not visible: not drawn
    found = Detections(
        np.array([[10, 10, 90, 90]], np.float32), np.array([0.9], np.float32), np.array([0]), keypoints=points
    )
    canvas = draw_detections(np.zeros((100, 100, 3), np.uint8), found)
    assert canvas[50, round(float(points[0, 5, 0]))].any()
    assert not canvas[50, 20].any()
