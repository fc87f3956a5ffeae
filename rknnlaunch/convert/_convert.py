"""`convert` end to end: read the ONNX, prepare calibration, drive rknn-toolkit2 stage by stage, and
write the .rknn atomically (temp file + rename: a failure never leaves a half-written model)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import ModelError, UsageError
from .._files import check_output, require_file, require_file_or_folder
from ..model import CUSTOM_STRING_LIMIT, ModelFacts, PackedFacts, names_file_for, pack_facts
from ..validate import decode_all, image_files
from ._plan import (
    GraphNode,
    LogSummary,
    calibration_hash,
    check_target,
    float_tail,
    input_size,
    with_float_layers,
)
from ._rewrite import prepare_file
from ._toolkit import (
    StageRunner,
    ToolkitFactory,
    ToolkitLike,
    ToolkitRuleError,
    load_toolkit,
    toolkit_version,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ConvertRequest:
    """What the user asked for (the CLI's flags, checked by `convert`)."""

    onnx: Path
    target: str
    output: Path | None = None
    quant_images: tuple[str, ...] = ()
    fp16: bool = False
    input_size: tuple[int, int] | None = None
    pad_value: int = 114
    """Ultralytics trains with grey (114) letterbox padding."""
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    verbose: bool = False


@dataclass(frozen=True)
class OnnxFacts:
    """What the source ONNX says about itself."""

    input_name: str
    input_shape: tuple[int | str | None, ...]
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    class_names: tuple[str, ...]
    sha256: str


@dataclass
class Converted:
    """A finished conversion; with ``keep_simulator`` its toolkit instance stays open for `infer`."""

    path: Path
    facts: ModelFacts
    log: LogSummary
    choice: str
    """Which quantisation was used and why (printed, and in the JSON report)."""
    seconds: float
    float_tail: tuple[str, ...] = ()
    """Tensors kept in float16 (int8-hybrid), as the toolkit's optimised graph names them."""
    toolkit: ToolkitLike | None = field(default=None, repr=False)
    names_file: Path | None = None
    """The class names beside the model, when they did not fit in the toolkit's custom string."""
    _runtime_ready: bool = False

    def infer(self, nhwc: npt.NDArray[np.uint8]) -> list[npt.NDArray[Any]]:
        """Run one letterboxed NHWC uint8 frame through the toolkit's simulator (x86 only)."""
        if self.toolkit is None:
            raise UsageError("the conversion's simulator was not kept", "convert with keep_simulator=True")
        runner = StageRunner()
        if not self._runtime_ready:
            runner.run("simulator", "start the simulator", lambda: self.toolkit.init_runtime(target=None))  # type: ignore[union-attr]
            self._runtime_ready = True
        batch = nhwc if nhwc.ndim == 4 else nhwc[None]
        outputs = runner.run(
            "simulator",
            "run the simulator",
            lambda: self.toolkit.inference(inputs=[batch], data_format="nhwc"),  # type: ignore[union-attr]
        )
        if not outputs:
            raise ModelError(
                "the simulator returned no outputs", "rerun with --verbose to see the toolkit log"
            )
        return [np.asarray(o) for o in outputs]

    def close(self) -> None:
        if self.toolkit is not None:
            with contextlib.suppress(Exception):
                self.toolkit.release()
            self.toolkit = None


def read_onnx(path: Path) -> OnnxFacts:
    """Input/output names and shapes, class names and sha256 of an ONNX file (`ModelError` if not ONNX).

    Read with onnxruntime (the `cpu` extra), so bad input is reported before the toolkit loads.
    """
    require_file(path, "ONNX model", "pass the path of an existing .onnx file", UsageError)
    data = path.read_bytes()
    if data[:4] == b"RKNN":
        raise UsageError(f"{path} is already an .rknn model", "pass the .onnx it was exported from")
    try:
        import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise UsageError(
            "onnxruntime is needed to read the ONNX model", "pip install 'rknnlaunch[cpu]'"
        ) from None
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"{path} is not an ONNX model onnxruntime can load ({first})",
            "pass the .onnx exported from your training framework (ultralytics: model.export(format='onnx'))",
        ) from None
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ModelError(
            f"{path} has {len(inputs)} inputs; convert takes YOLO models with one image input",
            "export the detection model alone (one image input)",
        )

    def dims(shape: Any) -> tuple[int | str | None, ...]:
        return tuple(
            d if isinstance(d, int) and d > 0 else (d if isinstance(d, str) else None) for d in shape
        )

    outputs = session.get_outputs()
    output_shapes = tuple(tuple(d if isinstance(d, int) and d > 0 else -1 for d in o.shape) for o in outputs)
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    return OnnxFacts(
        input_name=inputs[0].name,
        input_shape=dims(inputs[0].shape),
        output_names=tuple(o.name for o in outputs),
        output_shapes=output_shapes,
        class_names=tuple(_class_names(metadata, output_shapes)),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _class_names(metadata: dict[str, str], output_shapes: Sequence[tuple[int, ...]]) -> list[str]:
    from ..model import class_names
    from ..yolo import COCO_NAMES, class_count

    names = class_names({"metadata": metadata})
    if names:
        return names
    try:
        count = class_count([tuple(abs(d) for d in s) for s in output_shapes])
    except UsageError:
        return ["class0"]
    return list(COCO_NAMES) if count == len(COCO_NAMES) else [f"class{i}" for i in range(count)]


def quantization_choice(layout: str, fp16: bool) -> tuple[str, str]:
    """How `convert` builds a model of this decoder layout: (quantization, why), as printed.

    Every Ultralytics head (``ultralytics``, ``-seg``, ``-pose``, ``-obb``) ends in one
    ``[1, 4+nc(+extra), N]`` table whatever else it outputs (seg adds its protos), so each gets the
    hybrid build: counting outputs sent seg to plain int8, and its table found nothing (issue 19).
    """
    if fp16:
        return "fp16", "float16 throughout (--fp16)"
    if is_table_layout(layout):
        return "int8-hybrid", (
            f"int8 with the head's tail in float16 (hybrid quantisation): {layout}'s [1, 4+nc, N] table in "
            "int8 would give boxes and scores one scale and every score would round to 0"
        )
    return "int8", f"int8 ({layout}: boxes and scores are separate outputs)"


def is_table_layout(layout: str) -> bool:
    """Whether the layout's boxes and scores share one ``[1, C, N]`` table (Ultralytics' exports)."""
    return layout == "ultralytics" or layout.startswith("ultralytics-")


def output_layout(onnx: OnnxFacts, width: int, height: int) -> str:
    """The decoder layout of the ONNX's outputs (dynamic dims filled from the input size)."""
    from ..yolo import detect_layout

    anchors = sum((width // s) * (height // s) for s in (8, 16, 32))
    shapes = [tuple(anchors if d < 0 else d for d in shape) for shape in onnx.output_shapes]
    try:
        return str(detect_layout(shapes))
    except UsageError as exc:
        raise ModelError(exc.problem, exc.fix) from None


@dataclass(frozen=True)
class ConvertPreview:
    """What `rknnlaunch convert` would do with an ONNX, worked out without the toolkit (`model inspect`)."""

    command: str
    """The command line to run (int8 with calibration images; --fp16 needs none)."""
    input_size: tuple[int, int] | None = None
    layout: str | None = None
    quantization: str | None = None
    """Without --fp16: ``int8-hybrid`` (an Ultralytics [1, C, N] table) or ``int8`` (split heads)."""
    why: str | None = None
    names_form: str | None = None
    """Where the class names would go: ``list``, ``z85`` or ``file`` (docs/convert.md#class-names)."""
    problem: str | None = None
    """Set when convert would refuse the model (with ``fix``)."""
    fix: str | None = None


def preview_convert(path: Path, target: str = "rk3588") -> ConvertPreview:
    """`convert`'s decisions for ``path`` (its checks, layout, quantisation, names) without running it."""
    from .._errors import RknnLaunchError

    command = f"rknnlaunch convert {path.name} --target {target} --quant-images CALIBRATION_DIR"
    try:
        onnx = read_onnx(path)
        width, height = input_size(onnx.input_shape, None, onnx.input_name)
    except RknnLaunchError as exc:
        return ConvertPreview(command, problem=exc.problem, fix=exc.fix)
    try:
        layout = output_layout(onnx, width, height)
    except RknnLaunchError as exc:
        return ConvertPreview(command, (width, height), problem=exc.problem, fix=exc.fix)
    quantization, why = quantization_choice(layout, fp16=False)
    facts = ModelFacts.model_validate(
        {
            "class_names": list(onnx.class_names),
            "input_size": (width, height),
            "pad_value": 114,
            "output_layout": layout,
            "quantization": quantization,
            "source_onnx_sha256": onnx.sha256,
            "calibration_sha256": "0" * 64,
            "calibration_images": 100,
            "toolkit_version": "2.5.0",
        }
    )
    names_form = pack_facts(facts, names_file_for(default_output(path, target, False)).name).names_form
    return ConvertPreview(command, (width, height), layout, quantization, why, names_form)


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    """The toolkit's hybrid quantisation writes its files into the current directory."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def default_output(onnx: Path, target: str, fp16: bool) -> Path:
    return onnx.with_name(f"{onnx.stem}-{target}-{'fp16' if fp16 else 'int8'}.rknn")


def convert(
    request: ConvertRequest,
    progress: Progress,
    toolkit: ToolkitFactory | None = None,
    keep_simulator: bool = False,
) -> Converted:
    """Convert ``request.onnx``; every input is checked before the toolkit starts its long work."""
    started = time.monotonic()
    target = check_target(request.target)
    if request.fp16 == bool(request.quant_images):
        raise UsageError(
            "choose one of --quant-images DIR (int8) and --fp16",
            "int8 needs calibration images of the scenes the model sees (20-200 are typical); "
            "--fp16 needs none and is about 2x slower on the NPU",
        )
    # Every input path by the one rule before any is parsed (an unreadable calibration folder is
    # named before onnxruntime loads the model).
    require_file(request.onnx, "ONNX model", "pass the path of an existing .onnx file")
    for images in request.quant_images:
        require_file_or_folder(
            images, "--quant-images", "pass existing image files or folders to --quant-images"
        )
    onnx = read_onnx(request.onnx)
    width, height = input_size(onnx.input_shape, request.input_size, onnx.input_name)
    layout = output_layout(onnx, width, height)
    output = request.output or default_output(request.onnx, target, request.fp16)
    check_output(output, "-o", suffixes=(".rknn",), example="model.rknn")
    calibration = image_files(request.quant_images, "--quant-images") if request.quant_images else []
    frames = decode_all(calibration, "--quant-images") if calibration else []
    factory = toolkit or load_toolkit()

    quantization, choice = quantization_choice(layout, request.fp16)
    facts_base: dict[str, Any] = {
        "class_names": list(onnx.class_names),
        "input_size": (width, height),
        "mean": request.mean,
        "std": request.std,
        "pad_value": request.pad_value,
        "output_layout": layout,
        "quantization": quantization,
        "source_onnx_sha256": onnx.sha256,
        "calibration_sha256": calibration_hash(calibration) if calibration else None,
        "calibration_images": len(calibration),
        "toolkit_version": toolkit_version(),
    }
    # Packed now, before the toolkit's long work: the names go in the first form that fits the
    # toolkit's custom string (a list, compressed, or a file beside the model).
    packed = pack_facts(ModelFacts.model_validate(facts_base), names_file_for(output).name)
    if packed.names_form == "z85":
        progress(
            f"class names: {len(onnx.class_names)} names compressed (zlib + base85) to fit rknn-toolkit2's "
            f"{CUSTOM_STRING_LIMIT}-character custom string"
        )
    elif packed.names_form == "file":
        progress(
            f"class names: {len(onnx.class_names)} names do not fit in rknn-toolkit2's "
            f"{CUSTOM_STRING_LIMIT}-character custom string even compressed; they go to "
            f"{names_file_for(output).name} beside the model: ship both files together"
        )
    runner = StageRunner(request.verbose)
    steps = 4 if request.fp16 else 5
    temp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    names_file = names_file_for(output) if packed.names_file_text is not None else None
    names_temp = output.with_name(f".{names_file_for(output).name}.{os.getpid()}.tmp")
    instance: ToolkitLike | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="rknnlaunch-convert-") as work_dir:
            work = Path(work_dir)
            dataset = _write_calibration(frames, work, width, height, request.pad_value) if frames else None
            # what the toolkit loads: the ONNX itself, or a rewritten copy (opset, head) under its name
            source, prepared = prepare_file(request.onnx, work / "prepared")
            for note in prepared:
                progress(f"prepared for rknn-toolkit2: {note}")
            tail: tuple[str, ...] = ()
            hybrid = quantization == "int8-hybrid"
            if hybrid and dataset is None:  # image_files refuses an empty folder; kept explicit for -O
                raise UsageError(
                    "int8 needs calibration images and none were decoded",
                    "pass --quant-images DIR with 20-200 photos of the scenes the model sees",
                )

            def first_pass(disabled: Sequence[str]) -> ToolkitLike:
                """Load and build (or, hybrid, quantise step 1) with the toolkit's rules ``disabled``."""
                progress(f"[1/{steps}] loading {request.onnx.name} for {target} ({width}x{height})")
                loaded = _configured(
                    factory, runner, request, source, target, packed, onnx, width, height, disabled
                )
                try:
                    if hybrid:
                        # Which tensors stay float16 is known only after the toolkit optimised the
                        # graph (it renames tensors): this pass writes that graph and the quantisation table.
                        progress(
                            f"[2/{steps}] calibrating int8 on {len(frames)} images (minutes on a laptop)"
                        )
                        with _chdir(work):
                            runner.run(
                                "quantize",
                                "quantise (hybrid step 1)",
                                lambda: loaded.hybrid_quantization_step1(
                                    dataset=str(dataset), proposal=False
                                ),
                            )
                    else:
                        progress(f"[2/{steps}] compiling ({choice})")
                        runner.run(
                            "build",
                            "build the model",
                            lambda: loaded.build(
                                do_quantization=not request.fp16, dataset=str(dataset) if dataset else None
                            ),
                        )
                except BaseException:
                    with contextlib.suppress(Exception):
                        loaded.release()
                    raise
                return loaded

            instance, disabled = _with_rules_disabled(first_pass, progress)
            notes = prepared + tuple(
                f"rknn-toolkit2 optimiser rule {rule} disabled (it failed on this graph; the toolkit's own "
                "advice: disable_rules in rknn.config())"
                for rule in disabled
            )
            if hybrid:
                instance.release()
                instance = None
                stem = request.onnx.stem
                graph_file, data_file, config_file = (
                    work / f"{stem}.{ext}" for ext in ("model", "data", "quantization.cfg")
                )
                nodes, finals = _graph_nodes(graph_file)
                tail = _table_tail(nodes, finals)
                config_file.write_text(with_float_layers(config_file.read_text(), tail))
                progress(f"[3/{steps}] compiling with {len(tail)} head tensors in float16")
                instance = runner.run("build", "start rknn-toolkit2", factory)
                step2 = instance
                runner.run(
                    "build",
                    "build the hybrid model (step 2)",
                    lambda: step2.hybrid_quantization_step2(
                        model_input=str(graph_file),
                        data_input=str(data_file),
                        model_quantization_cfg=str(config_file),
                    ),
                )
            facts = ModelFacts.model_validate(facts_base)
            progress(f"[{steps - 1}/{steps}] writing {output}")
            exporter = instance
            runner.run("export", "export the .rknn", lambda: exporter.export_rknn(str(temp)))
            if not temp.is_file():
                raise ModelError("rknn-toolkit2 reported success but wrote no .rknn", "rerun with --verbose")
            if names_file is not None and packed.names_file_text is not None:
                names_temp.write_text(packed.names_file_text, encoding="utf-8")
                os.replace(names_temp, names_file)
            os.replace(temp, output)
        progress(f"[{steps}/{steps}] done in {time.monotonic() - started:.0f} s: {output}")
        log = dataclasses.replace(runner.summary(), notes=notes)
        result = Converted(
            output, facts, log, choice, time.monotonic() - started, tail, names_file=names_file
        )
        if keep_simulator:
            result.toolkit, instance = instance, None
        return result
    finally:
        with contextlib.suppress(OSError):
            temp.unlink()
        with contextlib.suppress(OSError):
            names_temp.unlink()
        if instance is not None:
            with contextlib.suppress(Exception):
                instance.release()


def _configured(
    factory: ToolkitFactory,
    runner: StageRunner,
    request: ConvertRequest,
    source: Path,
    target: str,
    packed: PackedFacts,
    onnx: OnnxFacts,
    width: int,
    height: int,
    disabled: Sequence[str] = (),
) -> ToolkitLike:
    """A toolkit instance set up for our letterbox (uint8 RGB in, (x - mean) / std), ``source`` (the
    ONNX or its prepared copy) loaded."""
    instance: ToolkitLike = runner.run("load", "start rknn-toolkit2", factory)
    custom = packed.custom_string
    runner.run(
        "config",
        "configure",
        lambda: instance.config(
            mean_values=[list(request.mean)],
            std_values=[list(request.std)],
            target_platform=target,
            custom_string=custom,
            **({"disable_rules": list(disabled)} if disabled else {}),
        ),
    )
    if request.input_size is None and onnx.input_shape[2:] == (height, width):
        load = lambda: instance.load_onnx(model=str(source))  # noqa: E731
    else:  # a dynamic (or overridden) input size is fixed here
        sizes = [[1, 3, height, width]]
        load = lambda: instance.load_onnx(  # noqa: E731
            model=str(source), inputs=[onnx.input_name], input_size_list=sizes
        )
    runner.run("load", f"load {request.onnx.name}", load)
    return instance


MAX_DISABLED_RULES = 3
"""How many of the toolkit's optimiser rules `convert` disables, one per retry, before giving up."""


def _with_rules_disabled(
    attempt: Callable[[Sequence[str]], ToolkitLike], progress: Progress
) -> tuple[ToolkitLike, tuple[str, ...]]:
    """``attempt(disabled)``, retried with each optimiser rule the toolkit names as failing
    disabled (its log: "You can add disable_rules=['RULE'] in rknn.config() to temporarily disable
    the error rule!"; captcha-recognizer's YOLO11s-seg fails so in hybrid step 1 on
    fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa and builds with it disabled)."""
    disabled: list[str] = []
    while True:
        try:
            return attempt(tuple(disabled)), tuple(disabled)
        except ToolkitRuleError as exc:
            if exc.rule in disabled or len(disabled) >= MAX_DISABLED_RULES:
                raise
            disabled.append(exc.rule)
            progress(
                f"rknn-toolkit2's optimiser rule {exc.rule} failed on this graph: retrying with it disabled"
            )


def _write_calibration(
    frames: Sequence[npt.NDArray[np.uint8]], work: Path, width: int, height: int, pad: int
) -> Path:
    """Letterbox each frame exactly as inference will, save it, list it in the toolkit's dataset file.

    Saved as BGR PNGs: the toolkit reads them with OpenCV and converts to RGB (quant_img_RGB2BGR=False),
    so it calibrates on the same RGB letterboxed pixels the runtime gets.
    """
    from ..yolo import Letterboxer, opencv

    cv2 = opencv()
    boxer = Letterboxer((width, height), pad_value=pad)
    listed = []
    for index, frame in enumerate(frames):
        rgb, _ = boxer(frame)
        file = work / f"calib{index:05d}.png"
        cv2.imwrite(str(file), cv2.cvtColor(rgb[0], cv2.COLOR_RGB2BGR))
        listed.append(str(file))
    dataset = work / "dataset.txt"
    dataset.write_text("\n".join(listed) + "\n")
    return dataset


def _table_tail(nodes: Sequence[GraphNode], outputs: Sequence[str]) -> tuple[str, ...]:
    """`float_tail` of the first output that is the head's table (a seg head's protos are not)."""
    failure: ModelError | None = None
    for output in outputs:
        try:
            return float_tail(nodes, output)
        except ModelError as exc:
            failure = failure or exc
    if failure is None:
        raise ModelError("the toolkit's optimised graph has no outputs", "convert with --fp16")
    raise failure


def _graph_nodes(graph_file: Path) -> tuple[list[GraphNode], tuple[str, ...]]:
    """The toolkit's optimised graph (ONNX protobuf) as `GraphNode`s and its output names."""
    import onnx  # type: ignore[import-not-found, import-untyped, unused-ignore]

    try:
        graph = onnx.load(str(graph_file), load_external_data=False).graph
    except Exception as exc:
        raise ModelError(
            f"cannot read the toolkit's optimised graph {graph_file.name} ({exc})", "convert with --fp16"
        ) from None
    nodes = [GraphNode(n.op_type, tuple(n.input), tuple(n.output)) for n in graph.node]
    return nodes, tuple(o.name for o in graph.output)
