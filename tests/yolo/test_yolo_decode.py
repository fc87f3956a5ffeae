"""YOLOv8 decoding: boxes encoded through the exact layouts come back; layouts and int8 agree."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlaunch import ModelError, UsageError
from rknnlaunch.yolo import (
    Detections,
    LetterboxInfo,
    Quant,
    YoloDecoder,
    detect_layout,
    dfl_distances,
    geometry,
    postprocess,
)
from rknnlaunch.yolo.testing import (
    SynthObject,
    dfl_logits,
    encode_rknn,
    encode_ultralytics,
    quantise,
    realistic_frame,
)

# One object per stride (small -> 8, medium -> 16, large -> 32), several classes, one off-centre.
OBJECTS = [
    SynthObject((10.0, 12.0, 50.0, 40.0), 7, 0.61),
    SynthObject((100.0, 120.0, 300.0, 330.0), 3, 0.9),
    SynthObject((150.5, 410.25, 229.75, 470.0), 0, 0.77),
    SynthObject((330.0, 180.0, 630.0, 636.0), 1, 0.8),
    SynthObject((500.0, 20.0, 520.0, 60.0), 79, 0.3),
]


def by_score(objects: list[SynthObject]) -> list[SynthObject]:
    return sorted(objects, key=lambda o: -o.score)


def assert_matches(
    found: Detections, objects: list[SynthObject], atol: float = 1e-3, score_atol: float = 1e-5
) -> None:
    want = by_score(objects)
    assert len(found) == len(want)
    np.testing.assert_allclose(found.boxes, np.array([o.box for o in want], np.float32), atol=atol)
    np.testing.assert_allclose(found.scores, [o.score for o in want], atol=score_atol)
    assert found.class_ids.tolist() == [o.class_id for o in want]
    assert found.boxes.dtype == np.float32 and found.class_ids.dtype == np.int64


@pytest.mark.parametrize("distance", [0.0, 0.25, 1.0, 7.5, 14.999, 15.0])
def test_dfl_encoding_round_trips(distance: float) -> None:
    logits = np.repeat(dfl_logits(distance)[None, :, None], 4, axis=0)
    assert dfl_distances(logits)[:, 0] == pytest.approx([distance] * 4, abs=1e-5)


def test_dfl_distance_is_softmax_expectation() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 16, 5)).astype(np.float32)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    want = (probs * np.arange(16)[None, :, None]).sum(axis=1)
    np.testing.assert_allclose(dfl_distances(logits.copy()), want, rtol=1e-5)


@pytest.mark.parametrize("with_sum", [True, False], ids=["rknn-9", "rknn-6"])
def test_rknn_layouts_decode_known_boxes(with_sum: bool) -> None:
    outputs = encode_rknn(OBJECTS, with_score_sum=with_sum)
    assert len(outputs) == (9 if with_sum else 6)
    assert [o.shape for o in outputs[:2]] == [(1, 64, 80, 80), (1, 80, 80, 80)]
    assert_matches(postprocess(outputs), OBJECTS)


def test_ultralytics_layout_decodes_known_boxes() -> None:
    outputs = encode_ultralytics(OBJECTS)
    assert outputs[0].shape == (1, 84, 8400)
    assert_matches(postprocess(outputs), OBJECTS)
    # Some exports are [1, N, 4 + nc]: same answer.
    assert_matches(postprocess([outputs[0].transpose(0, 2, 1).copy()]), OBJECTS)


def test_three_layouts_agree_on_a_realistic_frame() -> None:
    rng = np.random.default_rng(7)
    nine = realistic_frame(rng, objects=15)
    six = [o for i, o in enumerate(nine) if i % 3 != 2]
    a, b = postprocess(nine), postprocess(six)
    assert len(a) > 10
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.class_ids, b.class_ids)


def test_all_layouts_agree_on_the_same_objects() -> None:
    results = [
        postprocess(encode_rknn(OBJECTS)),
        postprocess(encode_rknn(OBJECTS, with_score_sum=False)),
        postprocess(encode_ultralytics(OBJECTS)),
    ]
    for other in results[1:]:
        np.testing.assert_allclose(other.boxes, results[0].boxes, atol=1e-3)
        np.testing.assert_array_equal(other.class_ids, results[0].class_ids)
        np.testing.assert_allclose(other.scores, results[0].scores, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("with_sum", [True, False], ids=["rknn-9", "rknn-6"])
def test_quantised_rknn_outputs_decode_within_tolerance(dtype: type[np.integer], with_sum: bool) -> None:
    floats = encode_rknn(OBJECTS, with_score_sum=with_sum)
    pairs = [quantise(t, dtype) for t in floats]
    outputs = [q for q, _ in pairs]
    quant = [qp for _, qp in pairs]
    found = YoloDecoder(quant=quant)(outputs)
    # int8 DFL logits lose ~0.1 of a bin: at stride 32 that is a few pixels.
    assert_matches(found, OBJECTS, atol=4.0, score_atol=0.01)


def test_quantised_ultralytics_output_decodes_within_tolerance() -> None:
    # One 8-bit tensor cannot hold both 0..640 px coordinates and 0..1 scores (a step is 2.5, so
    # every score rounds to 0): that is why rknn_model_zoo splits the heads. 16 bits can.
    q, quant = quantise(encode_ultralytics(OBJECTS)[0], np.int16)
    found = postprocess([q], quant=[quant])
    assert_matches(found, OBJECTS, atol=0.05, score_atol=0.01)


def test_quantised_threshold_keeps_scores_exactly_at_the_threshold() -> None:
    obj = [SynthObject((100.0, 100.0, 140.0, 140.0), 2, 0.5)]
    pairs = [quantise(t, np.int8) for t in encode_rknn(obj)]
    outputs, quant = [q for q, _ in pairs], [qp for _, qp in pairs]
    cls_q, cls_quant = outputs[1], quant[1]
    real = (np.float32(cls_q.max()) - np.float32(cls_quant.zero_point)) * np.float32(cls_quant.scale)
    assert len(postprocess(outputs, quant=quant, conf=float(real))) == 1
    assert len(postprocess(outputs, quant=quant, conf=float(real) + 1e-4)) == 0


def test_integer_outputs_without_quant_are_refused() -> None:
    q, _ = quantise(encode_ultralytics(OBJECTS)[0], np.int8)
    with pytest.raises(UsageError, match="zero point"):
        postprocess([q])


def test_boxes_map_back_to_the_original_image() -> None:
    info = geometry(1920, 1080, 640, 640)  # scale 1/3, 140 px pad top and bottom
    source_box = np.array([300.0, 150.0, 900.0, 750.0], np.float32)
    input_box = source_box * np.float32(1 / 3) + np.array([0, 140, 0, 140], np.float32)
    obj = SynthObject(tuple(float(v) for v in input_box), 5, 0.9)  # type: ignore[arg-type]
    found = postprocess(encode_rknn([obj]), info)
    np.testing.assert_allclose(found.boxes[0], source_box, atol=1e-2)


def test_boxes_are_clipped_to_the_image() -> None:
    info = LetterboxInfo(1.0, 1.0, 0, 100, 640, 440, 640, 640)
    obj = SynthObject((600.0, 50.0, 640.0, 160.0), 0, 0.9)  # reaches into the top pad
    box = postprocess(encode_rknn([obj]), info).boxes[0]
    assert box.tolist() == pytest.approx([600.0, 0.0, 640.0, 60.0], abs=1e-3)


def test_thresholds_filter() -> None:
    outputs = encode_rknn(OBJECTS)
    assert len(postprocess(outputs, conf=0.62)) == 3
    assert len(postprocess(outputs, conf=0.95)) == 0
    assert len(postprocess(outputs, max_detections=2)) == 2


def test_nms_suppresses_overlapping_same_class_but_not_other_classes() -> None:
    objects = [
        SynthObject((100.0, 100.0, 200.0, 200.0), 1, 0.9),
        SynthObject((108.0, 104.0, 208.0, 204.0), 1, 0.8),  # same class, IoU ~0.78 -> suppressed
        SynthObject((116.0, 100.0, 216.0, 200.0), 2, 0.7),  # other class -> kept
    ]
    found = postprocess(encode_ultralytics(objects))
    assert found.class_ids.tolist() == [1, 2]


def test_empty_frames_give_empty_detections() -> None:
    for outputs in (encode_rknn([]), encode_rknn([], with_score_sum=False), encode_ultralytics([])):
        found = postprocess(outputs)
        assert len(found) == 0 and found.boxes.shape == (0, 4)


def test_layout_detection() -> None:
    assert detect_layout([o.shape for o in encode_rknn([])]) == "rknn-9"
    assert detect_layout([o.shape for o in encode_rknn([], with_score_sum=False)]) == "rknn-6"
    assert detect_layout([(1, 6, 8400)]) == "ultralytics"
    with pytest.raises(ModelError, match=r"not a YOLO layout we decode.*\[1, 1000\]"):
        detect_layout([(1, 1000)])
    with pytest.raises(ModelError, match="not 4 sides x DFL bins"):
        detect_layout([(1, 63, 80, 80)] * 9)


def test_bad_settings_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        YoloDecoder(conf=1.5)
    with pytest.raises(UsageError):
        YoloDecoder(layout="yolov7")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="quantisation entries"):
        YoloDecoder(quant=[Quant(0, 1.0)])(encode_rknn([]))
    with pytest.raises(ModelError, match=r"layout rknn-9 does not fit .* needs 9 outputs, got 6"):
        YoloDecoder(layout="rknn-9")(encode_rknn([], with_score_sum=False))


def test_one_threshold_vocabulary_with_deprecated_aliases() -> None:
    """conf/iou everywhere (make_decoder, YoloDecoder, postprocess, Detector, --conf/--iou); the old
    conf_threshold/iou_threshold keywords still work, with a DeprecationWarning."""
    outputs = encode_ultralytics(OBJECTS)
    decoder = YoloDecoder(conf=0.5, iou=0.6)
    assert (decoder.conf, decoder.iou) == (0.5, 0.6)
    assert decoder.decoder_for([o.shape for o in outputs]).conf == 0.5
    with pytest.warns(DeprecationWarning) as warned:
        old = YoloDecoder(conf_threshold=0.5, iou_threshold=0.6)
    assert [str(w.message).split(";")[0] for w in warned] == [
        "conf_threshold= is deprecated",
        "iou_threshold= is deprecated",
    ]
    assert (old.conf, old.iou, old.conf_threshold, old.iou_threshold) == (0.5, 0.6, 0.5, 0.6)
    with pytest.warns(DeprecationWarning, match="iou_threshold= is deprecated"):
        same = postprocess(outputs, iou_threshold=0.6)
    np.testing.assert_array_equal(same.boxes, postprocess(outputs, iou=0.6).boxes)
