"""The comparison maths of `validate`, table-tested: matching, agreement, drift, recall, cosine,
AP/mAP50 and the likely-cause choice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rknnlaunch.validate import (
    Found,
    average_precision,
    compare_image,
    cosine,
    likely_cause,
    map50,
    match,
    pairwise_iou,
    parse_yolo_labels,
    relative_error,
    totals,
)

A = [0.0, 0.0, 100.0, 100.0]
A_SHIFTED = [10.0, 0.0, 110.0, 100.0]  # IoU 90/110 = 0.818
FAR = [300.0, 300.0, 400.0, 400.0]


def test_pairwise_iou() -> None:
    iou = pairwise_iou(np.array([A, A]), np.array([A, A_SHIFTED, FAR, [5, 5, 5, 5]]))
    assert iou.shape == (2, 4)
    assert iou[0].tolist() == pytest.approx([1.0, 90 / 110, 0.0, 0.0])


@pytest.mark.parametrize(
    ("reference", "device", "expected"),
    [
        (Found.of([A], [0.9], [0]), Found.of([A_SHIFTED], [0.8], [0]), [(0, 0, 90 / 110)]),
        (Found.of([A], [0.9], [0]), Found.of([A_SHIFTED], [0.8], [1]), []),  # class differs
        (Found.of([A], [0.9], [0]), Found.of([FAR], [0.8], [0]), []),  # IoU < 0.5
        # one-to-one: the best IoU wins the shared box
        (Found.of([A, A_SHIFTED], [0.9, 0.8], [0, 0]), Found.of([A_SHIFTED], [0.7], [0]), [(1, 0, 1.0)]),
        (Found.of([], [], []), Found.of([A], [0.5], [0]), []),
    ],
)
def test_match(reference: Found, device: Found, expected: list[tuple[int, int, float]]) -> None:
    got = match(reference, device)
    assert [(i, j) for i, j, _ in got] == [(i, j) for i, j, _ in expected]
    assert [v for _, _, v in got] == pytest.approx([v for _, _, v in expected])


def test_image_and_total_agreement() -> None:
    ref = Found.of([A, FAR], [0.9, 0.3], [0, 1])
    dev = Found.of([A_SHIFTED], [0.7], [0])
    out = [np.ones((1, 6, 4), np.float32)]
    image = compare_image("a.jpg", ref, dev, out, out)
    assert (image.matched, image.union, image.agreement) == (1, 2, 0.5)
    assert image.score_drifts == pytest.approx((-0.2,))
    assert image.reference_per_class == {0: 1, 1: 1} and image.matched_per_class == {0: 1}
    assert image.cosine == (1.0,)
    empty = compare_image("b.jpg", Found.of([], [], []), Found.of([], [], []), out, [np.zeros((1, 6, 4))])
    assert empty.agreement == 1.0 and empty.cosine == (0.0,)
    total = totals([image, empty])
    assert (total.matched, total.reference_count, total.device_count) == (1, 2, 1)
    assert total.agreement == 0.5 and total.recall_per_class == {0: 1.0, 1: 0.0}
    assert total.mean_iou == pytest.approx(90 / 110) and total.mean_abs_score_drift == pytest.approx(0.2)
    assert total.cosine_mean == (0.5,) and total.cosine_min == (0.0,)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 0], [1, 0], 1.0),
        ([1, 0], [0, 1], 0.0),
        ([1, 1], [-1, -1], -1.0),
        ([0, 0], [0, 0], 1.0),
        ([0, 0], [1, 0], 0.0),
        ([1, 2, 3], [1, 2], None),
    ],
)
def test_cosine(a: list[float], b: list[float], expected: float | None) -> None:
    got = cosine(np.array(a), np.array(b))
    assert got == (None if expected is None else pytest.approx(expected))


def test_cosine_of_big_float16_tensors_does_not_overflow() -> None:
    big = np.full((1, 6, 8400), 60000, np.float16)
    assert cosine(big, big) == pytest.approx(1.0)


def test_average_precision_all_points() -> None:
    # 2 positives; predictions: hit, miss, hit -> precision 1, 1/2, 2/3 at recall .5, .5, 1
    recall = np.array([0.5, 0.5, 1.0])
    precision = np.array([1.0, 0.5, 2 / 3])
    assert average_precision(recall, precision) == pytest.approx(0.5 * 1.0 + 0.5 * 2 / 3)
    assert average_precision(np.array([]), np.array([])) == 0.0


def test_map50_against_labels() -> None:
    labels = [Found.of([A], [1.0], [0]), Found.of([FAR], [1.0], [1])]
    perfect = [Found.of([A], [0.9], [0]), Found.of([FAR], [0.8], [1])]
    value, per_class = map50(perfect, labels)
    assert value == pytest.approx(1.0) and per_class == {0: 1.0, 1: 1.0}
    # class 1 found with the wrong class; class 0 found plus a higher-scored false positive
    worse = [Found.of([FAR, A], [0.95, 0.9], [0, 0]), Found.of([FAR], [0.8], [0])]
    value, per_class = map50(worse, labels)
    assert per_class[1] == 0.0 and per_class[0] == pytest.approx(0.5)
    assert value == pytest.approx(0.25)
    assert map50([Found.of([], [], [])], [Found.of([], [], [])]) == (None, {})


def test_yolo_labels() -> None:
    found = parse_yolo_labels("0 0.5 0.5 0.5 0.25\n\n1 0.1 0.1 0.2 0.2\n", 200, 100)
    assert found.boxes.tolist() == [[50.0, 37.5, 150.0, 62.5], [0.0, 0.0, 40.0, 20.0]]
    assert found.class_ids.tolist() == [0, 1]
    for bad in ("0 0.5 0.5 0.5", "x 0.5 0.5 0.5 0.5", "0 1.5 0.5 0.5 0.5", "-1 0.5 0.5 0.5 0.5"):
        with pytest.raises(ValueError, match=r"img\.txt:1"):
            parse_yolo_labels(bad, 10, 10, "img.txt")


@pytest.mark.parametrize(
    ("errors", "cause"),
    [
        ({"correct": 0.01, "scale": 0.9, "layout": 0.8}, None),
        ({"correct": 0.9, "scale": 0.02, "layout": 0.8, "bgr": 0.6}, "scale"),
        ({"correct": 0.9, "scale": 0.6, "layout": 0.7}, None),  # not clearly better: no call
        ({"correct": 0.9, "scale": None, "layout": 0.001}, "layout"),
        ({"correct": None, "bgr": 0.2}, "bgr"),
    ],
)
def test_likely_cause(errors: dict[str, float | None], cause: str | None) -> None:
    assert likely_cause(errors) == cause


def test_relative_error() -> None:
    assert relative_error(np.array([3.0, 4.0]), np.array([3.0, 4.0])) == 0.0
    assert relative_error(np.array([3.0, 4.0]), np.array([0.0, 0.0])) == 1.0
    assert relative_error(np.zeros(2), np.ones(2)) == float("inf")
    assert relative_error(np.zeros(2), np.ones(3)) is None


def test_totals_of_nothing() -> None:
    total = totals([])
    assert total.agreement == 1.0 and total.mean_iou is None and math.isclose(total.images, 0)
