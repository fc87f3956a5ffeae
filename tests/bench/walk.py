"""Measure the walk of `rknnlaunch bench`'s arguments through the code: rooms and returns.

Method (dynamic taint, printed as numbers; not a test, run it by hand):

- Run ``rknnlaunch bench`` on a fixture RK3588 (tests/fakehost.py) with the bench tests' fake
  RKNNLite installed as ``rknnlite.api`` (``-n 1 --warmup 1 --no-process-pool --no-progress``,
  so every case kind but the process pool runs, in this process).
- Taint: the first ``argparse.Namespace`` any rknnlaunch function receives; what is tainted taints
  its items and attribute values two levels down (None, bools and ints are never tracked: their
  identity means nothing; the walk passes ``--conf``/``--iou`` so floats of the user's are), so an
  options object built from the flags is followed too. A call of an rknnlaunch function with a
  tainted argument, a tainted ``self`` or a closure over a tainted value is a *step* of the walk,
  and what a step returns is tainted too: the arguments' consequences (the plan, the cases, the
  runtimes, the report). ``--arguments-only`` follows the flags' own values and nothing they
  produce (a far narrower walk).
- A step's *room* is its module (``--package``: its layer, ``rknnlaunch.bench``...). Each
  distinct (caller room, callee room) pair between steps in different rooms is one *move*
  (counted once, so loops over frames do not inflate the figures). A move into a room the walk
  had visited before that move first happened is a *return to a room already left*; a
  *callback* is the subset of those into a room still open lower on the call stack (the runner
  calling back into the CLI or the code that started it).
- Two figures: the whole walk, and the bench's walk: only the moves made by or into the bench's
  own code (``rknnlaunch.cli._bench``, ``rknnlaunch.bench.*``); the other layers' calls among
  themselves are theirs (the runtime reading the model, the pipeline using YOLO).

Run: ``python tests/bench/walk.py [--package] [--arguments-only]`` (prints the moves in order,
flagged, and the figures).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bench_fakes import FakeRknnLite, write_rknn  # noqa: E402

from fakehost import make_host  # noqa: E402


def _untracked(value: object) -> bool:
    return value is None or isinstance(value, bool | int)


class Walk:
    def __init__(self, granularity: str = "module", follow_results: bool = False) -> None:
        self.granularity = granularity
        self.follow_results = follow_results
        self.tainted: dict[int, object] = {}  # id -> object (kept alive so ids stay unique)
        self.stack: list[tuple[str, bool]] = []  # (module, is a step) per active rknnlaunch frame
        self.visited: list[str] = []
        # (from, to, into a room visited before, into a room still open lower on the stack)
        self.moves: list[tuple[str, str, bool, bool]] = []
        self._seen_moves: set[tuple[str, str]] = set()

    def taint(self, value: object, depth: int = 2) -> None:
        """Taint ``value`` and, ``depth`` levels down, its items and attribute values."""
        if _untracked(value) or isinstance(value, types.ModuleType | type):
            return
        self.tainted[id(value)] = value
        if depth == 0 or isinstance(value, str | bytes | Path):
            return
        items: list[object] = []
        if isinstance(value, list | tuple | set | frozenset):
            items = list(value)[:64]
        elif isinstance(value, dict):
            items = list(value.values())[:64]
        elif hasattr(value, "__dict__") and not callable(value):
            items = list(vars(value).values())
        elif hasattr(value, "__slots__"):
            items = [getattr(value, name, None) for name in value.__slots__]
        for item in items:
            self.taint(item, depth - 1)

    def is_tainted(self, value: object) -> bool:
        return not _untracked(value) and self.tainted.get(id(value)) is value

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("rknnlaunch"):
            return
        if self.granularity == "package":  # a room is a layer: rknnlaunch.bench, rknnlaunch.yolo...
            module = ".".join(module.split(".")[:2])
        if event == "call":
            # At a call, f_locals holds the arguments and the closure's free variables: a callback
            # built from the arguments (a closure over the plan) is a step too.
            values = list(frame.f_locals.values())
            if not self.tainted:
                for value in values:
                    if isinstance(value, argparse.Namespace):
                        self.taint(value)
            step = any(self.is_tainted(value) for value in values)
            if step:
                open_rooms = [m for m, was_step in self.stack if was_step]
                caller = open_rooms[-1] if open_rooms else None
                if caller is not None and caller != module and (caller, module) not in self._seen_moves:
                    self._seen_moves.add((caller, module))
                    self.moves.append((caller, module, module in self.visited, module in open_rooms[:-1]))
                if module not in self.visited:
                    self.visited.append(module)
            self.stack.append((module, step))
        elif self.stack:
            _module, step = self.stack.pop()
            if step and self.follow_results:
                self.taint(arg)


def main() -> int:
    class RKNNLite(FakeRknnLite):  # the real class's constructor takes verbose=
        def __init__(self, verbose: bool = False) -> None:
            super().__init__()

    fake = types.ModuleType("rknnlite.api")
    fake.RKNNLite = RKNNLite  # type: ignore[attr-defined]
    sys.modules["rknnlite"] = types.ModuleType("rknnlite")
    sys.modules["rknnlite.api"] = fake
    with tempfile.TemporaryDirectory() as tmp:
        host = make_host("rk3588-drm", Path(tmp) / "host")
        model = write_rknn(Path(tmp) / "yolov8s.rknn")
        os.environ["RKNNLAUNCH_ROOT"] = str(host.root)
        from rknnlaunch.cli._main import main as cli_main

        argv = [
            "bench",
            "--model",
            str(model),
            "-n",
            "1",
            "--warmup",
            "1",
            "--no-process-pool",
            "--conf",
            "0.3",
            "--iou",
            "0.5",
        ]
        argv += ["--no-progress", "--json", str(Path(tmp) / "b.json")]
        walk = Walk(
            "package" if "--package" in sys.argv else "module",
            follow_results="--arguments-only" not in sys.argv,
        )
        out = io.StringIO()
        stdout, sys.stdout = sys.stdout, out
        sys.setprofile(walk.profile)
        try:
            code = cli_main(argv)
        finally:
            sys.setprofile(None)
            sys.stdout = stdout
    if code != 0:
        print(out.getvalue())
        print(f"bench exited {code}")
        return 1
    print("moves (* = into a room visited before, ^ = into a room still open lower on the stack,")
    print("       b = made by or into the bench's own code):")
    for source, target, back, up in walk.moves:
        flags = ("*" if back else " ") + ("^" if up else " ") + ("b" if _bench_move(source, target) else " ")
        print(f"  {flags} {source} -> {target}")
    bench_moves = [move for move in walk.moves if _bench_move(move[0], move[1])]
    for name, moves, rooms in (
        ("whole walk", walk.moves, set(walk.visited)),
        ("the bench's walk", bench_moves, {room for move in bench_moves for room in move[:2]}),
    ):
        back, up = sum(move[2] for move in moves), sum(move[3] for move in moves)
        print(f"{name}: rooms {len(rooms)}, returns to a room already left {back} (of them callbacks {up})")
    return 0


def _bench_move(source: str, target: str) -> bool:
    """A move the bench's code decides: out of, or back into, `cli._bench` or `rknnlaunch.bench`."""
    return any(room.startswith(("rknnlaunch.cli", "rknnlaunch.bench")) for room in (source, target))


if __name__ == "__main__":
    raise SystemExit(main())
