"""Does a .rknn still detect what its ONNX detected? Comparison maths (pure) and the runs behind
`rknnlaunch validate` / `convert --validate`; schema `rknnlaunch.validate/1` (docs/validate.md)."""

from ._compare import (
    CAUSES,
    Found,
    ImageComparison,
    Totals,
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
from ._images import decode_all, image_files
from ._run import (
    SCHEMA,
    OnnxReference,
    ValidateReport,
    compare_with_reference,
    print_report,
    write_json,
    write_plot,
)

__all__ = [
    "CAUSES",
    "Found",
    "ImageComparison",
    "OnnxReference",
    "SCHEMA",
    "Totals",
    "ValidateReport",
    "average_precision",
    "compare_image",
    "compare_with_reference",
    "cosine",
    "decode_all",
    "image_files",
    "likely_cause",
    "map50",
    "match",
    "pairwise_iou",
    "parse_yolo_labels",
    "print_report",
    "relative_error",
    "totals",
    "write_json",
    "write_plot",
]
