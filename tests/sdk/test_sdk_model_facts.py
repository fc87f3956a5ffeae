"""`decoder_facts`: what the YOLO decoder learns from a model file's exporter metadata."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rknnlaunch.model._metadata import decoder_facts

ULTRALYTICS_POSE = {
    "task": "pose",
    "names": "{0: 'person'}",
    "imgsz": "[640, 640]",
    "stride": "32",
    "kpt_shape": "[17, 3]",
    "author": "Ultralytics",
}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (
            {"metadata": ULTRALYTICS_POSE},
            {"task": "pose", "names": ["person"], "imgsz": [640, 640], "stride": 32, "kpt_shape": [17, 3]},
        ),
        ({"metadata": {"names": "{0: 'fall', 2: 'stand'}"}}, {"names": ["fall", "class 1", "stand"]}),
        ({"metadata": {"task": "Segment", "imgsz": "(480, 640)"}}, {"task": "segment", "imgsz": [480, 640]}),
        # .rknn: the facts `convert` embeds in the custom string, already typed
        (
            {"custom": {"task": "obb", "names": ["plane", "ship"], "layout": "rknn-obb"}},
            {"task": "obb", "names": ["plane", "ship"], "layout": "rknn-obb"},
        ),
        # malformed values mean "not known", never an error or a wrong type
        ({"metadata": {"names": "{'a': 1}", "imgsz": "big", "stride": "[", "task": "7"}}, {}),
        ({"metadata": {"names": "{-1: 'x'}", "kpt_shape": "True"}}, {}),
        ({"metadata": {"end2end": "True", "task": "detect"}}, {"end2end": True, "task": "detect"}),
        ({"metadata": {"end2end": "1"}}, {}),
        # an .rknn built by `rknnlaunch convert`: its embedded facts win over the exporter's
        (
            {
                "facts": {
                    "task": "detect",
                    "class_names": ["a", "b"],
                    "output_layout": "ultralytics",
                    "input_size": [640, 480],
                },
                "metadata": {"names": "{0: 'x'}"},
            },
            {"task": "detect", "names": ["a", "b"], "layout": "ultralytics", "imgsz": [480, 640]},
        ),
        ({"metadata": "not a mapping"}, {}),
        ({}, {}),
    ],
)
def test_decoder_facts_table(metadata: dict[str, Any], expected: dict[str, Any]) -> None:
    assert decoder_facts(metadata) == expected


@given(
    st.dictionaries(
        st.sampled_from(["task", "names", "imgsz", "stride", "layout", "kpt_shape", "x"]),
        st.one_of(st.text(max_size=60), st.integers(), st.none(), st.lists(st.integers())),
    )
)
def test_decoder_facts_never_raises(raw: dict[str, Any]) -> None:
    facts = decoder_facts({"metadata": raw})
    assert set(facts) <= {"task", "names", "imgsz", "stride", "layout", "kpt_shape", "anchors", "end2end"}
