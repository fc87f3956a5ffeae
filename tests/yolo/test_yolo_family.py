"""The YOLO family layouts: known objects encoded through each layout's exact encoding decode back.

YOLOv5 (zoo anchors), YOLOv10 (zoo, top-k), end-to-end [1, N, 6], seg, pose and OBB in the
rknn_model_zoo and Ultralytics layouts, float and quantised; plus layout detection from shapes
and metadata, and YOLO11 / YOLOv5u pinned to the YOLOv8 layouts.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from rknnlaunch import ModelError, UsageError
from rknnlaunch.yolo import (
    Detections,
    LetterboxInfo,
    Quant,
    YoloDecoder,
    detect_layout,
    geometry,
    make_decoder,
    postprocess,
    rle_decode,
)
from rknnlaunch.yolo.testing import (
    SynthObject,
    encode_end2end,
    encode_rknn,
    encode_rknn_obb,
    encode_rknn_pose,
    encode_rknn_seg,
    encode_ultralytics,
    encode_yolov5,
    place,
    quantise,
)

OBJECTS = [
    SynthObject((10.0, 12.0, 50.0, 40.0), 7, 0.61),
    SynthObject((100.0, 120.0, 300.0, 330.0), 3, 0.9),
    SynthObject((150.5, 410.25, 229.75, 470.0), 0, 0.77),
    SynthObject((500.0, 20.0, 520.0, 60.0), 79, 0.3),
]


def shapes(outputs: list[npt.NDArray[np.generic]]) -> list[tuple[int, ...]]:
    return [tuple(o.shape) for o in outputs]


def assert_boxes(found: Detections, objects: list[SynthObject], atol: float = 1e-3) -> None:
    want = sorted(objects, key=lambda o: -o.score)
    assert len(found) == len(want)
    np.testing.assert_allclose(found.boxes, [o.box for o in want], atol=atol)
    np.testing.assert_allclose(found.scores, [o.score for o in want], atol=max(atol / 100, 1e-5))
    assert found.class_ids.tolist() == [o.class_id for o in want]


# --- YOLOv8 / YOLO11 / YOLOv5u: one layout family -------------------------------------------


def test_yolo11_and_yolov5u_are_the_yolov8_layouts() -> None:
    # rknn_model_zoo's yolo11 export has yolov8's 9 outputs; Ultralytics' YOLO11 and YOLOv5u ONNX
    # exports are yolov8's single [1, 4 + nc, N] table (anchor-free DFL head, decoded in-graph).
    yolo11_zoo = [(1, 64, 80, 80), (1, 80, 80, 80), (1, 1, 80, 80)]
    yolo11_zoo += [(1, 64, 40, 40), (1, 80, 40, 40), (1, 1, 40, 40)]
    yolo11_zoo += [(1, 64, 20, 20), (1, 80, 20, 20), (1, 1, 20, 20)]
    assert detect_layout(yolo11_zoo) == "rknn-9"
    meta = {
        "description": "Ultralytics YOLO11n model",
        "task": "detect",
        "names": {i: str(i) for i in range(80)},
    }
    assert detect_layout([(1, 84, 8400)], meta) == "ultralytics"
    assert (
        detect_layout([(1, 84, 8400)], {**meta, "description": "Ultralytics YOLOv5nu model"}) == "ultralytics"
    )
    outputs = encode_ultralytics(OBJECTS)
    assert_boxes(make_decoder(shapes(outputs), meta)(outputs), OBJECTS)


def test_rknn_9_note_says_yolov10_fits_the_same_shapes() -> None:
    decoder = make_decoder(shapes(encode_rknn([])))
    assert decoder.layout == "rknn-9"
    assert decoder.note is not None and "rknn-yolov10" in decoder.note and "layout=" in decoder.note


def test_ultralytics_table_without_metadata_says_pose_and_obb_also_fit() -> None:
    decoder = make_decoder([(1, 84, 8400)])
    assert decoder.layout == "ultralytics" and decoder.plan.num_classes == 80
    assert (
        decoder.note is not None and "ultralytics-pose" in decoder.note and "ultralytics-obb" in decoder.note
    )
    named = make_decoder([(1, 84, 8400)], {"names": [str(i) for i in range(80)]})
    assert named.note is None and named.names is not None and named.names[79] == "79"
    assert make_decoder([(1, 84, 8400)], task="pose").plan.num_classes == 80 - 51
    assert make_decoder([(1, 84, 8400)], {"task": "obb"}).plan.num_classes == 79


# --- YOLOv5 (rknn_model_zoo, anchor-based) ---------------------------------------------------


def test_yolov5_zoo_layout_decodes_known_boxes() -> None:
    outputs = encode_yolov5(OBJECTS)
    assert shapes(outputs) == [(1, 255, 80, 80), (1, 255, 40, 40), (1, 255, 20, 20)]
    decoder = make_decoder(shapes(outputs))
    assert decoder.layout == "rknn-yolov5" and decoder.task == "detect"
    assert_boxes(decoder(outputs), OBJECTS)


def test_yolov5_anchors_are_overridable() -> None:
    anchors = [
        [(20, 20), (40, 40), (30, 60)],
        [(60, 60), (80, 120), (120, 80)],
        [(150, 150), (250, 250), (400, 300)],
    ]
    outputs = encode_yolov5(OBJECTS, anchors=anchors)
    assert_boxes(make_decoder(shapes(outputs), anchors=anchors)(outputs), OBJECTS)
    flat = [v for row in anchors for pair in row for v in pair]
    assert_boxes(make_decoder(shapes(outputs), {"anchors": str(flat)})(outputs), OBJECTS)
    standard = make_decoder(shapes(outputs))(outputs)  # the wrong anchors give other sizes
    assert not np.allclose(standard.boxes, sorted([o.box for o in OBJECTS], key=lambda b: 0), atol=1)
    with pytest.raises(UsageError, match="anchor values"):
        make_decoder(shapes(outputs), anchors=[1, 2, 3])


def test_yolov5_int8_decodes_within_tolerance() -> None:
    pairs = [quantise(t, np.int8) for t in encode_yolov5(OBJECTS, rng=np.random.default_rng(3))]
    outputs, quant = [q for q, _ in pairs], [qp for _, qp in pairs]
    found = make_decoder(shapes(outputs), quant=quant)(outputs)
    assert_boxes(found, OBJECTS, atol=3.0)


# --- YOLOv10 (zoo) and end-to-end heads -------------------------------------------------------


def test_end2end_rows_are_taken_as_they_are_without_nms() -> None:
    overlapping = [
        SynthObject((100.0, 100.0, 200.0, 200.0), 1, 0.9),
        SynthObject((101.0, 100.0, 201.0, 200.0), 1, 0.8),
    ]
    outputs = encode_end2end([*overlapping, SynthObject((5.0, 5.0, 9.0, 9.0), 2, 0.1)])
    decoder = make_decoder(shapes(outputs), {"names": ["a", "b", "c"]})
    assert decoder.layout == "end2end" and decoder.note is None
    found = decoder(outputs)
    assert_boxes(found, overlapping)  # both kept (no NMS), the 0.1 row under the threshold
    assert found.names == ("a", "b", "c")
    assert len(make_decoder(shapes(outputs), max_detections=1)(outputs)) == 1
    unsorted = encode_end2end([SynthObject((5.0, 5.0, 9.0, 9.0), 2, 0.4), *overlapping])
    found = decoder(unsorted, LetterboxInfo(0.5, 0.5, 0, 0, 1280, 1280, 640, 640))
    assert found.class_ids.tolist() == [1, 1, 2] and found.scores.tolist() == pytest.approx([0.9, 0.8, 0.4])
    np.testing.assert_allclose(found.boxes[2], [10, 10, 18, 18])


def test_end2end_is_told_from_a_two_class_channels_last_table() -> None:
    assert detect_layout([(1, 300, 6)]) == "end2end"
    assert detect_layout([(1, 8400, 6)]) == "ultralytics"  # one row per anchor: a table
    assert detect_layout([(1, 6, 8400)]) == "ultralytics"
    assert detect_layout([(1, 8400, 6)], {"end2end": True}) == "end2end"


def test_end2end_seg_pose_obb_heads() -> None:
    # YOLO26-style NMS-free heads: [1, N, 6 + nm] + protos, [1, N, 6 + 17*3], [1, N, 7].
    rng = np.random.default_rng(4)
    protos = rng.normal(size=(32, 160, 160)).astype(np.float32)
    objects = seg_objects(rng)
    outputs = [*encode_end2end(objects, task="segment"), protos[None]]
    decoder = make_decoder(shapes(outputs))
    assert (decoder.layout, decoder.task) == ("end2end-seg", "segment")
    found = decoder(outputs)
    assert_boxes(found, objects)
    assert found.masks is not None
    np.testing.assert_array_equal(found.masks, expected_proto_masks(objects, protos))

    outputs = encode_end2end(PEOPLE, task="pose")
    decoder = make_decoder(shapes(outputs), {"kpt_shape": [17, 3]})
    assert decoder.layout == "end2end-pose" and shapes(outputs) == [(1, 300, 57)]
    found = decoder(outputs)
    assert found.keypoints is not None
    np.testing.assert_allclose(found.keypoints, [p.keypoints for p in PEOPLE], atol=1e-4)

    outputs = encode_end2end(PLANES, task="obb")
    decoder = make_decoder(shapes(outputs))
    assert decoder.layout == "end2end-obb" and shapes(outputs) == [(1, 300, 7)]
    found = decoder(outputs)
    assert_boxes(found, PLANES)
    assert found.angles is not None
    np.testing.assert_allclose(found.angles, [o.angle for o in PLANES], atol=1e-6)


def test_rknn_yolov10_is_top_k_without_nms() -> None:
    overlapping = [
        SynthObject((100.0, 100.0, 200.0, 200.0), 1, 0.9),
        SynthObject((108.0, 104.0, 208.0, 204.0), 1, 0.8),
    ]
    outputs = encode_rknn(overlapping)
    assert len(make_decoder(shapes(outputs))(outputs)) == 1  # rknn-9: NMS suppresses
    found = make_decoder(shapes(outputs), layout="rknn-yolov10")(outputs)
    assert_boxes(found, overlapping)
    assert make_decoder(shapes(outputs), {"layout": "rknn-yolov10"}).layout == "rknn-yolov10"


# --- pose ---------------------------------------------------------------------------------------


def person(box: tuple[float, float, float, float], score: float, seed: int) -> SynthObject:
    rng = np.random.default_rng(seed)
    x1, y1, x2, y2 = box
    kpts = tuple(
        (float(rng.uniform(x1, x2)), float(rng.uniform(y1, y2)), float(rng.uniform(0, 1))) for _ in range(17)
    )
    return SynthObject(box, 0, score, keypoints=kpts)


PEOPLE = [person((100.0, 120.0, 300.0, 330.0), 0.9, 1), person((400.0, 50.0, 470.0, 250.0), 0.7, 2)]


@pytest.mark.parametrize("layout", ["rknn-pose", "ultralytics-pose"])
def test_pose_layouts_decode_keypoints_through_the_letterbox(layout: str) -> None:
    if layout == "rknn-pose":
        outputs = encode_rknn_pose(PEOPLE)
        assert shapes(outputs)[3] == (1, 17, 3, 8400) and shapes(outputs)[0] == (1, 65, 80, 80)
    else:
        outputs = encode_ultralytics(PEOPLE, num_classes=1, task="pose")
        assert shapes(outputs) == [(1, 56, 8400)]
    decoder = make_decoder(shapes(outputs), {"task": "pose", "kpt_shape": [17, 3], "names": {0: "person"}})
    assert decoder.layout == layout
    info = geometry(1920, 1080, 640, 640)  # scale 1/3, 140 px pad top and bottom
    found = decoder(outputs, info)
    assert found.task == "pose" and found.keypoints is not None and found.keypoints.shape == (2, 17, 3)
    want = np.array([p.keypoints for p in PEOPLE], np.float32)
    want[:, :, 0] = want[:, :, 0] * 3
    want[:, :, 1] = (want[:, :, 1] - 140) * 3
    want[:, :, :2] = np.clip(want[:, :, :2], 0, [1920, 1080])
    np.testing.assert_allclose(found.keypoints, want, atol=1e-2)
    row = found.to_json()["detections"][0]
    assert row["name"] == "person" and len(row["keypoints"]) == 17


def test_pose_int8_heads_with_float16_keypoints() -> None:
    # The zoo's quantised pose model keeps the keypoint tensor in float16.
    outputs = encode_rknn_pose(PEOPLE)
    pairs = [quantise(t, np.int8) for t in outputs[:3]]
    quant: list[Quant | None] = [qp for _, qp in pairs] + [None]
    raw = [q for q, _ in pairs] + [outputs[3].astype(np.float16)]
    found = make_decoder(shapes(raw), quant=quant)(raw)
    assert len(found) == 2 and found.keypoints is not None
    np.testing.assert_allclose(found.boxes, [p.box for p in PEOPLE], atol=1.5)
    np.testing.assert_allclose(found.keypoints[0, :, :2], np.array(PEOPLE[0].keypoints)[:, :2], atol=0.5)


def test_pose_keypoints_without_visibility() -> None:
    two = [
        SynthObject(p.box, 0, p.score, keypoints=tuple((x, y, 0.0) for x, y, _ in p.keypoints or ()))
        for p in PEOPLE
    ]
    table = encode_ultralytics(two, num_classes=1, task="pose")[0]
    xy_only = np.delete(table, np.arange(4 + 1 + 2, table.shape[1], 3), axis=1)  # drop visibility rows
    found = make_decoder([xy_only.shape], {"task": "pose", "kpt_shape": [17, 2]})([xy_only])
    assert found.keypoints is not None and (found.keypoints[:, :, 2] == 1).all()


# --- OBB ----------------------------------------------------------------------------------------

PLANES = [
    SynthObject((200.0, 200.0, 300.0, 240.0), 2, 0.8, angle=0.5),
    SynthObject((400.0, 400.0, 460.0, 500.0), 5, 0.7, angle=-0.3),
    SynthObject((60.0, 500.0, 140.0, 540.0), 14, 0.6, angle=2.0),
]


@pytest.mark.parametrize("layout", ["rknn-obb", "ultralytics-obb"])
def test_obb_layouts_decode_rotated_boxes(layout: str) -> None:
    if layout == "rknn-obb":
        outputs = encode_rknn_obb(PLANES)
        assert shapes(outputs)[0] == (1, 79, 80, 80) and shapes(outputs)[3] == (1, 1, 8400)
    else:
        outputs = encode_ultralytics(PLANES, num_classes=15, task="obb")
        assert shapes(outputs) == [(1, 20, 8400)]
    decoder = make_decoder(shapes(outputs), task="obb")
    assert decoder.layout == layout
    found = decoder(outputs)
    assert_boxes(found, PLANES)
    assert found.angles is not None
    np.testing.assert_allclose(found.angles, [o.angle for o in PLANES], atol=1e-5)
    corners = found.corners()[0]  # centre (250, 220), w 100, h 40, rotated by 0.5 rad
    half = np.array([50 * math.cos(0.5), 50 * math.sin(0.5)])
    np.testing.assert_allclose(corners[1] - corners[0], 2 * half, atol=1e-3)
    np.testing.assert_allclose(corners.mean(axis=0), (250, 220), atol=1e-3)


def test_obb_nms_is_rotated() -> None:
    # Same class, nearly the same centre, crossed at 90 degrees: the unrotated boxes overlap by
    # IoU ~0.88, the rotated ones by ~0.2: both kept.
    crossed = [
        SynthObject((200.0, 230.0, 320.0, 270.0), 1, 0.9, angle=0.0),
        SynthObject((208.0, 230.0, 328.0, 270.0), 1, 0.8, angle=math.pi / 2),  # next anchor
    ]
    outputs = encode_ultralytics(crossed, num_classes=15, task="obb")
    assert len(make_decoder(shapes(outputs), task="obb")(outputs)) == 2
    same = [crossed[0], SynthObject((202.0, 230.0, 322.0, 270.0), 1, 0.8, angle=0.02)]
    outputs = encode_ultralytics(same, num_classes=15, task="obb")
    assert len(make_decoder(shapes(outputs), task="obb")(outputs)) == 1


def test_obb_int8() -> None:
    outputs = encode_rknn_obb(PLANES)
    pairs = [quantise(t, np.int8) for t in outputs]
    raw, quant = [q for q, _ in pairs], [qp for _, qp in pairs]
    found = make_decoder(shapes(raw), quant=quant)(raw)
    assert len(found) == 3 and found.angles is not None
    np.testing.assert_allclose(found.angles, [o.angle for o in PLANES], atol=0.02)


# --- segmentation -----------------------------------------------------------------------------


def seg_objects(rng: np.random.Generator) -> list[SynthObject]:
    return [
        SynthObject((101.0, 122.0, 299.0, 331.0), 3, 0.9, coefficients=tuple(rng.normal(size=32))),
        SynthObject((402.0, 50.0, 470.0, 251.0), 0, 0.7, coefficients=tuple(rng.normal(size=32))),
    ]


def expected_proto_masks(
    objects: list[SynthObject], protos: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]:
    """Straightforward reference: sigmoid(coef . protos) > 0.5 over the whole map, then crop."""
    masks = []
    rows, cols = np.mgrid[0:160, 0:160]
    for obj in sorted(objects, key=lambda o: -o.score):
        coef = np.array(obj.coefficients, np.float32)
        prob = 1 / (1 + np.exp(-np.tensordot(coef, protos, axes=1)))
        x1, y1, x2, y2 = (v / 4 for v in obj.box)
        masks.append((prob > 0.5) & (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2))
    return np.array(masks)


@pytest.mark.parametrize("layout", ["rknn-seg", "ultralytics-seg"])
def test_seg_layouts_give_masks_for_kept_boxes(layout: str) -> None:
    rng = np.random.default_rng(5)
    protos = rng.normal(size=(32, 160, 160)).astype(np.float32)
    objects = seg_objects(rng)
    if layout == "rknn-seg":
        outputs = encode_rknn_seg(objects, protos, rng=rng)
        assert len(outputs) == 13 and shapes(outputs)[3] == (1, 32, 80, 80)
    else:
        outputs = [*encode_ultralytics(objects, task="segment"), protos[None]]
        assert shapes(outputs) == [(1, 116, 8400), (1, 32, 160, 160)]
    decoder = make_decoder(shapes(outputs))
    assert decoder.layout == layout and decoder.task == "segment"
    found = decoder(outputs)
    assert_boxes(found, objects)
    assert found.masks is not None and found.masks.shape == (2, 160, 160)
    np.testing.assert_array_equal(found.masks, expected_proto_masks(objects, protos))
    assert found.mask_region == (0.0, 0.0, 160.0, 160.0)
    rle = found.to_json()["detections"][0]["mask"]
    np.testing.assert_array_equal(rle_decode(rle), found.masks[0])


def test_seg_masks_at_image_resolution_agree_with_proto_resolution() -> None:
    rng = np.random.default_rng(6)
    protos = rng.normal(size=(32, 160, 160)).astype(np.float32)
    protos = np.repeat(np.repeat(protos[:, ::4, ::4], 4, axis=1), 4, axis=2)  # smooth: 4x4 blocks
    objects = seg_objects(rng)
    outputs = [*encode_ultralytics(objects, task="segment"), protos[None]]
    info = geometry(1280, 720, 640, 640)  # scale 0.5, pad 140 top/bottom
    small = make_decoder(shapes(outputs))(outputs, info)
    big = make_decoder(shapes(outputs), masks="image")(outputs, info)
    assert small.masks is not None and big.masks is not None
    assert big.masks.shape == (2, 720, 1280) and big.mask_region == (0.0, 0.0, 1280.0, 720.0)
    assert small.mask_region == pytest.approx((0.0, 35.0, 160.0, 125.0))
    # Downsample the image-resolution mask back onto the proto grid: they agree almost everywhere.
    region = small.masks[:, 35:125, :]
    down = big.masks.reshape(2, 90, 8, 160, 8).mean(axis=(2, 4)) > 0.5
    assert (down == region).mean() > 0.98


def test_seg_int8_protos_and_coefficients() -> None:
    # rknn_model_zoo quantises each output on its own range (a whole Ultralytics table in int8
    # would share one scale between pixel coordinates and scores: not an export anyone uses).
    rng = np.random.default_rng(7)
    protos = rng.normal(size=(32, 160, 160)).astype(np.float32)
    objects = seg_objects(rng)
    outputs = encode_rknn_seg(objects, protos)
    pairs = [quantise(t, np.int8) for t in outputs]
    raw, quant = [q for q, _ in pairs], [qp for _, qp in pairs]
    found = make_decoder(shapes(raw), quant=quant)(raw)
    assert found.masks is not None
    want = expected_proto_masks(objects, protos)
    assert (found.masks == want).mean() > 0.995


# --- malformed outputs --------------------------------------------------------------------------


def rknn9() -> list[tuple[int, ...]]:
    return shapes(encode_rknn([]))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([(2, *s[1:]) for s in rknn9()], r"output 0 \[2, 64, 80, 80\] has batch 2"),
        ([(1, s[2], s[3], s[1]) for s in rknn9()], r"look NHWC \(\[1, H, W, C\], e.g. \[1, 80, 80, 64\]\)"),
        (
            [rknn9()[i] for i in (0, 3, 6, 1, 4, 7, 2, 5, 8)],
            r"grouped by kind.*order them per stride",
        ),
        (
            [*rknn9()[:4], (1, 79, 40, 40), *rknn9()[5:]],
            r"disagree on the class count: output 1 \[1, 80, 80, 80\] -> 80, "
            r"output 4 \[1, 79, 40, 40\] -> 79",
        ),
        (
            [*rknn9()[:1], (1, 80, 40, 40), *rknn9()[2:]],
            r"class scores output 1 \[1, 80, 40, 40\] does not share",
        ),
        ([(1, 84, 8400), (1, 84, 8400)], "not a YOLO layout"),
        ([(1, 3, 4)], r"output 0 \[1, 3, 4\] is too small"),
        ([(8400,)], r"output 0 \[8400\] is not a \[1, C, N\] table"),
    ],
)
def test_malformed_output_sets_are_model_errors(bad: list[tuple[int, ...]], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        make_decoder(bad)


def test_forced_layout_that_does_not_fit_is_a_model_error() -> None:
    with pytest.raises(ModelError, match=r"layout rknn-pose does not fit .*needs 4 outputs"):
        make_decoder(rknn9(), layout="rknn-pose")
    with pytest.raises(ModelError, match=r"layout end2end does not fit .*\[1, 84, 8400\] is not \[1, N, 6\]"):
        make_decoder([(1, 84, 8400)], layout="end2end")
    with pytest.raises(ModelError, match=r"gives 80 classes but the metadata names 2"):
        make_decoder([(1, 84, 8400)], {"names": ["a", "b"]}, layout="ultralytics")
    with pytest.raises(UsageError, match="unknown YOLO output layout"):
        make_decoder(rknn9(), layout="yolov7")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="unknown task"):
        make_decoder(rknn9(), task="classify")
    with pytest.raises(ModelError, match="kpt_shape"):
        make_decoder([(1, 56, 8400)], {"kpt_shape": "[17, 4]"})
    with pytest.raises(ModelError, match="unknown metadata task 'classify'"):
        make_decoder([(1, 84, 8400)], {"task": "classify"})
    assert make_decoder([(1, 84, 8400)], {"task": "classify"}, task="detect").task == "detect"


def test_decoders_and_results_pickle_for_process_workers() -> None:
    import pickle

    rng = np.random.default_rng(2)
    protos = rng.normal(size=(32, 160, 160)).astype(np.float32)
    outputs = [*encode_ultralytics(seg_objects(rng), task="segment"), protos[None]]
    wrapper = YoloDecoder()
    found = wrapper(outputs)
    again = pickle.loads(pickle.dumps(wrapper))(outputs)
    copied = pickle.loads(pickle.dumps(found))
    assert copied.masks is not None and found.masks is not None
    np.testing.assert_array_equal(copied.masks, found.masks)
    np.testing.assert_array_equal(again.boxes, found.boxes)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_rknn_9_and_yolov5_quantised_int8_and_uint8(dtype: type[np.integer]) -> None:
    for outputs in (encode_rknn(OBJECTS), encode_yolov5(OBJECTS)):
        pairs = [quantise(t, dtype) for t in outputs]
        raw, quant = [q for q, _ in pairs], [qp for _, qp in pairs]
        found = make_decoder(shapes(raw), quant=quant)(raw)
        assert_boxes(found, OBJECTS, atol=3.0)


def test_outputs_of_other_shapes_than_the_decoder_was_made_for() -> None:
    decoder = make_decoder(rknn9())
    with pytest.raises(ModelError, match="the model gave 6 outputs; this rknn-9 decoder was made for 9"):
        decoder(encode_rknn([], with_score_sum=False))
    with pytest.raises(ModelError, match=r"output 0 has shape \[1, 64, 40, 40\]"):
        decoder(encode_rknn([], input_size=320))


def test_non_finite_outputs_never_give_non_finite_detections(caplog: pytest.LogCaptureFixture) -> None:
    outputs = encode_rknn(OBJECTS)
    spot = place([OBJECTS[1]])[0]  # poison object 1's box logits with NaN
    outputs[3 * spot.stride_index].reshape(64, -1)[:, spot.anchor] = np.nan
    decoder = make_decoder(shapes(outputs))
    with caplog.at_level("WARNING", logger="rknnlaunch.yolo"):
        found = decoder(outputs)
        decoder(outputs)
    assert len(found) == len(OBJECTS) - 1 and np.isfinite(found.boxes).all()
    assert decoder.dropped_non_finite == 2
    assert sum("dropped 1 candidate" in r.getMessage() for r in caplog.records) == 1
    table = encode_ultralytics(OBJECTS)[0]
    table[0, 4, :] = np.inf
    table[0, :4, 0] = np.inf
    found = postprocess([table])
    assert np.isfinite(found.boxes).all() and np.isfinite(found.scores).all()


def test_yolo_decoder_wrapper_caches_one_decoder_per_shape_set() -> None:
    wrapper = YoloDecoder(metadata={"names": ["p"] * 80})
    a = wrapper(encode_rknn(OBJECTS))
    b = wrapper(encode_ultralytics(OBJECTS))
    assert_boxes(a, OBJECTS)
    assert_boxes(b, OBJECTS)
    assert len(wrapper._decoders) == 2
    assert a.names is not None and a.class_name(3) == "p"


def test_rotated_corners_map_back_unclipped() -> None:
    info = LetterboxInfo(0.5, 0.5, 0, 140, 1280, 720, 640, 640)
    outputs = encode_ultralytics([SynthObject((0.0, 200.0, 100.0, 240.0), 1, 0.9, angle=0.7)], 15, task="obb")
    found = make_decoder(shapes(outputs), task="obb")(outputs, info)
    np.testing.assert_allclose(found.boxes[0], [0.0, 120.0, 200.0, 200.0], atol=1e-3)
    assert found.corners()[0, :, 0].min() < 0  # a corner sticks out of the image: not clipped


def test_every_layout_is_documented() -> None:
    from pathlib import Path

    from rknnlaunch.yolo import LAYOUTS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "yolo.md").read_text()
    for layout in LAYOUTS:
        assert f"| `{layout}` |" in doc, f"docs/yolo.md has no row for {layout}"
