"""Pool workers against the simulated NPU: order, back-pressure, faults, shutdown, threads and processes."""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rknnfile_builder import write_rknn
from rknnlite_fake import SimulatedNpu

import rknnlaunch
from rknnlaunch import InferenceError, Pool, UsageError, WorkerDiedError
from rknnlaunch.npu import HostRoot
from rknnlaunch.runtime._affinity import big_cpus, cpu_ratings, find_big_cpus
from rknnlaunch.runtime._workers import describe_exit
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]
CRASH, NONE = 250, 251


def frame(value: int) -> np.ndarray:
    return np.full((640, 640, 3), value, dtype=np.uint8)


def value_of(outputs: list[np.ndarray]) -> int:
    return int(outputs[0].flat[0])


@pytest.fixture
def setup(host_factory: HostFactory, tmp_path: Path) -> tuple[Path, Any, SimulatedNpu]:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "yolov8n.rknn", targets=("rk3588",))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    locks = tmp_path / "npu"
    locks.mkdir()
    sim = SimulatedNpu(str(locks), single_core_ms=2.0, crash_value=CRASH, none_value=NONE)
    return model, settings, sim


def released(sim: SimulatedNpu) -> int:
    return len(list(Path(sim.lock_dir).glob("released-*")))


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_map_keeps_order_with_bounded_in_flight(setup: tuple[Path, Any, SimulatedNpu], workers: str) -> None:
    model, settings, sim = setup
    pulled: list[int] = []

    def frames() -> Iterator[np.ndarray]:
        for value in range(60):
            pulled.append(value)
            yield frame(value)

    with Pool(model, settings=settings, rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        assert pool.size == 3 and pool.workers == workers
        assert pool.labels == tuple(f"NPU rk3588 core {c} (mask {1 << c})" for c in range(3))
        results = pool.map(frames(), in_flight=4)
        first = next(results)
        assert value_of(first) == 0 and len(pulled) == 4  # back-pressure: nothing read ahead
        values = [value_of(first)] + [value_of(outputs) for outputs in results]
        assert values == list(range(60))
        with pytest.raises(
            UsageError, match=r"uint16 of shape \(640, 640, 3\); this model takes 'images' uint8 1x640x640x3"
        ):
            pool.submit(frame(1).astype(np.uint16))
        with pytest.raises(InferenceError, match="returned no outputs on NPU rk3588 core"):
            pool.infer(frame(NONE))
        assert value_of(pool.infer(frame(9))) == 9
    assert released(sim) == 3
    with pytest.raises(InferenceError, match="this pool is closed"):
        pool.submit(frame(1))


def test_process_outputs_come_back_through_shared_memory(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, sim = setup
    with Pool(model, settings=settings, rknnlite=sim, workers="process", contexts_per_core=2) as pool:
        assert pool.size == 6  # six contexts started with no overlapping init (the sim fails those)
        pids = set(pool._workers.pids)  # type: ignore[union-attr]
        assert len(pids) == 6 and os.getpid() not in pids
        outputs = pool.infer(frame(3))
        assert outputs[0].shape == (1, 6, 8400) and outputs[0].dtype == np.float32
        assert not outputs[0].flags.owndata  # a view of the output slot: no copy on the way back
        kept = [pool.infer(frame(v)) for v in range(20)]  # held results pin slots, then get copied
        assert [value_of(o) for o in kept] == list(range(20))
    assert released(sim) == 6
    assert value_of(outputs) == 3  # still readable after close


def test_a_dying_worker_fails_only_its_frames_and_is_replaced(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, sim = setup
    with Pool(model, settings=settings, rknnlite=sim, workers="process") as pool:
        before = set(pool._workers.pids)  # type: ignore[union-attr]
        futures: list[Future[list[np.ndarray]]] = [pool.submit(frame(v % 200)) for v in range(30)]
        futures.insert(15, pool.submit(frame(CRASH)))
        futures += [pool.submit(frame(v)) for v in range(30, 60)]
        outcomes: list[object] = []
        for future in futures:
            try:
                outcomes.append(value_of(future.result(timeout=120)))
            except WorkerDiedError as exc:
                outcomes.append(exc)
        died = [o for o in outcomes if isinstance(o, WorkerDiedError)]
        assert 1 <= len(died) <= 2  # the crashing frame, and at most the one queued behind it
        assert all(
            "started a replacement" in str(e) and e.cores and "killed by SIGKILL" in str(e) for e in died
        )
        assert "NPU core" in str(died[0]) and str(died[0].cores[0]) in str(died[0])
        assert sum(isinstance(o, int) for o in outcomes) == len(futures) - len(died)
        assert value_of(pool.infer(frame(4))) == 4
        after = set(pool._workers.pids)  # type: ignore[union-attr]
        assert len(after) == 3 and len(after - before) == 1
    assert released(sim) == 3  # the killed worker never released; its replacement and the others did


def test_a_worker_killed_by_sigbus_is_told_to_enlarge_dev_shm(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    """A full /dev/shm (64 MB in a container) kills the writing worker with SIGBUS: say so."""
    assert describe_exit(-signal.SIGBUS) == "was killed by SIGBUS"
    assert describe_exit(-99) == "was killed by signal 99" and describe_exit(3) == "exited with code 3"
    model, settings, sim = setup
    slow = SimulatedNpu(sim.lock_dir, single_core_ms=5000.0)
    with Pool(model, [0], settings=settings, rknnlite=slow, workers="process") as pool:
        (pid,) = pool._workers.pids  # type: ignore[union-attr]
        future = pool.submit(frame(1))
        os.kill(pid, signal.SIGBUS)
        error = future.exception(timeout=60)
        assert isinstance(error, WorkerDiedError) and error.cores == (0,)
        assert "killed by SIGBUS" in str(error) and "/dev/shm" in str(error) and "emptyDir" in str(error)


def test_cpu_affinity_pins_workers_to_the_cpus_found(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    host = HostRoot(setup[1].root)
    assert cpu_ratings(host) == {cpu: 1024 if cpu >= 4 else 414 for cpu in range(8)}
    assert find_big_cpus(host) == {4, 5, 6, 7}
    assert big_cpus({0: 2400, 1: 2400}) == {0, 1} and big_cpus({}) == frozenset()
    model, settings, sim = setup
    mine = sorted(os.sched_getaffinity(0))
    with Pool(model, settings=settings, rknnlite=sim, workers="process", cpu_affinity=[mine[0]]) as pool:
        for pid in pool._workers.pids:  # type: ignore[union-attr]
            assert os.sched_getaffinity(pid) == {mine[0]}
    with pytest.raises(UsageError, match="workers='process'"):
        Pool(model, settings=settings, rknnlite=sim, cpu_affinity="big")


SCRIPT = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's stack dump if it hangs
# Ctrl-C is KeyboardInterrupt even if the launcher left SIGINT ignored (a shell's background job).
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = {paths!r}
import numpy as np
from rknnlite_fake import SimulatedNpu
import rknnlaunch
from rknnlaunch.settings._env import load_settings

if __name__ == "__main__":
    sim = SimulatedNpu({locks!r}, single_core_ms=2.0)
    settings = load_settings({{"RKNNLAUNCH_ROOT": {root!r}}})
    with rknnlaunch.Pool({model!r}, settings=settings, rknnlite=sim, workers="process") as pool:
        def frames():
            while True:
                yield np.zeros((640, 640, 3), np.uint8)
        for index, _ in enumerate(pool.map(frames())):
            if index == 10:
                print(" ".join(map(str, pool._workers.pids)), flush=True)
"""


def test_a_program_without_a_main_guard_is_told_to_add_one(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    """Each worker process imports the main module: an unguarded Pool there fails in the worker."""
    model, settings, sim = setup
    paths = [p for p in sys.path if p]
    code = SCRIPT.format(paths=paths, locks=sim.lock_dir, root=str(settings.root), model=str(model))
    script = Path(sim.lock_dir).parent / "unguarded.py"
    script.write_text(textwrap.dedent(code).replace('if __name__ == "__main__":', "if True:"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "while opening its runtime" in done.stderr and "move that under" in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_worker_outlives_its_program(setup: tuple[Path, Any, SimulatedNpu], signum: int) -> None:
    model, settings, sim = setup
    paths = [p for p in sys.path if p]
    code = SCRIPT.format(paths=paths, locks=sim.lock_dir, root=str(settings.root), model=str(model))
    program = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert program.stdout is not None
    pids = [int(pid) for pid in program.stdout.readline().split()]
    assert len(pids) == 3
    watches = [os.pidfd_open(pid) for pid in pids]
    try:
        program.send_signal(signum)
        try:
            program.wait(timeout=60)
        except subprocess.TimeoutExpired:
            program.send_signal(signal.SIGUSR1)  # every thread's stack, then end it
            time.sleep(1)
            program.kill()
            pytest.fail(f"the program did not exit; its threads:\n{program.communicate()[1][-6000:]}")
        for watch in watches:  # each becomes readable when that worker has exited
            assert select.select([watch], [], [], 60)[0] == [watch]
    finally:
        for watch in watches:
            os.close(watch)
        if program.poll() is None:
            program.kill()
    assert released(sim) == 3  # every context released, whichever way the program ended


def test_a_ctrl_c_can_neither_leave_the_pool_lock_held_nor_be_swallowed(
    setup: tuple[Path, Any, SimulatedNpu],
) -> None:
    """docs/sdk.md#ctrl-c: no thread enters the pool's lock through the Condition's Python
    __enter__, and dropping a result runs no Python code (where a KeyboardInterrupt is lost)."""
    model, settings, sim = setup
    entered: list[str] = []

    class Recording(threading.Condition):
        def __enter__(self) -> bool:
            entered.append(threading.current_thread().name)
            return super().__enter__()

    with Pool(model, settings=settings, rknnlite=sim, workers="process") as pool:
        pool._workers._changed.__class__ = Recording  # type: ignore[union-attr]
        results = list(pool.map(frame(i) for i in range(12)))
        assert [value_of(r) for r in results] == list(range(12))
        ran: list[str] = []

        watched = (os.path.dirname(rknnlaunch.__file__), "weakref.py", "shared_memory.py")

        def profile(code_frame: Any, event: str, arg: Any) -> None:
            where = code_frame.f_code.co_filename
            if event == "call" and (where.startswith(watched[0]) or where.endswith(watched[1:])):
                ran.append(f"{where}:{code_frame.f_code.co_name}")

        sys.setprofile(profile)
        try:
            del results  # no cycles: freed here, by reference counting
        finally:
            sys.setprofile(None)
        assert ran == []
        assert value_of(pool.infer(frame(7))) == 7  # the slots freed by the drop are reused
    assert entered == []


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_leaving_with_on_ctrl_c_fails_queued_frames_instead_of_running_them(
    setup: tuple[Path, Any, SimulatedNpu], workers: str
) -> None:
    model, settings, sim = setup
    slow = SimulatedNpu(sim.lock_dir, single_core_ms=200.0)
    running = threading.Event()
    factory: Any = slow
    if workers == "thread":
        # A thread worker takes frame 0 from the queue when it gets to it: the interrupt must land
        # after that (awaited, not timed; it once landed first and failed frame 0 as queued, issue 19).
        def factory() -> Any:
            lite = slow()
            inference = lite.inference

            def noting_start(inputs: list[Any], **options: Any) -> Any:
                running.set()
                return inference(inputs, **options)

            lite.inference = noting_start  # type: ignore[method-assign]
            return lite
    else:
        running.set()  # a free worker process is sent frame 0 inside submit() itself
    futures: list[Future[Any]] = []
    pool = Pool(model, [0], settings=settings, rknnlite=factory, workers=workers)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt), pool:
        futures = [pool.submit(frame(0))]
        assert running.wait(60)
        futures += [pool.submit(frame(i)) for i in range(1, 8)]
        raise KeyboardInterrupt
    outcomes = [f.exception(timeout=60) for f in futures]
    assert outcomes[0] is None  # running when the interrupt came: it ends
    assert any(isinstance(e, InferenceError) for e in outcomes)  # queued: failed, never run
    assert released(slow) == 1


def test_ctrl_c_during_a_send_does_not_hang_close(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    """A Ctrl-C can land in submit() after the job is in flight but before its message left:
    close() must not wait for a reply that never comes."""
    model, settings, sim = setup
    pool = Pool(model, settings=settings, rknnlite=sim, workers="process")
    procs = pool._workers._procs  # type: ignore[union-attr]
    pids = list(pool._workers.pids)  # type: ignore[union-attr]

    class Interrupted:
        def __init__(self, proc: Any) -> None:
            self.proc, self.real = proc, proc.conn

        def send(self, message: Any) -> None:
            for proc in procs:
                proc.conn = proc.conn.real
            raise KeyboardInterrupt

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    for proc in procs:
        proc.conn = Interrupted(proc)
    with pytest.raises(KeyboardInterrupt):
        pool.submit(frame(1))
    closing = threading.Thread(target=pool.close, daemon=True)
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert released(sim) == 3


def test_submit_racing_close_resolves_every_frame(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, sim = setup
    pool = Pool(model, settings=settings, rknnlite=sim, workers="process")
    futures: list[Future[list[np.ndarray]]] = []
    start = threading.Barrier(3)

    def submit_many() -> None:
        start.wait()
        for value in range(100):
            try:
                futures.append(pool.submit(frame(value)))
            except InferenceError:
                return

    submitters = [threading.Thread(target=submit_many) for _ in range(2)]
    for thread in submitters:
        thread.start()
    start.wait()
    pool.close()
    for thread in submitters:
        thread.join()
    for future in futures:
        assert future.done()
        assert future.exception() is None or isinstance(future.exception(), InferenceError)
    assert released(sim) == 3


def test_factory_by_dotted_path_and_bad_worker_kind(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, _sim = setup
    with pytest.raises(UsageError, match="workers='fibre'"):
        Pool(model, settings=settings, workers="fibre")  # type: ignore[arg-type]
    with pytest.raises(InferenceError, match="does not name an importable factory"):
        Pool(model, settings=settings, rknnlite="no_such_module:make")
    assert rknnlaunch.WorkerDiedError is WorkerDiedError


def test_workers_collect_garbage_periodically(
    setup: tuple[Path, Any, SimulatedNpu], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RKNNLite loops grow through reference cycles (public report): workers gc.collect() every N
    frames (thread workers also at most every GC_MIN_INTERVAL_S: a full collection stalls them all)."""
    from rknnlaunch.runtime import _tasks, _threads, _workers

    collections: list[int] = []
    monkeypatch.setattr(_tasks.gc, "collect", lambda *args: collections.append(1) or 0)
    monkeypatch.setattr(_workers, "GC_EVERY", 5)  # the pool reads it from its front, per pool
    monkeypatch.setattr(_threads, "GC_MIN_INTERVAL_S", 0.0)
    model, settings, sim = setup
    with Pool(model, settings=settings, rknnlite=sim) as pool:
        assert len(list(pool.map(frame(1) for _ in range(20)))) == 20
    assert len(collections) == 4


def test_a_worker_that_cannot_open_its_context_fails_the_pool_with_the_runtime_reason(
    setup: tuple[Path, Any, SimulatedNpu],
) -> None:
    model, settings, sim = setup
    wrong = SimulatedNpu(sim.lock_dir, soc="rk3568")  # a runtime that finds another SoC
    with pytest.raises(
        rknnlaunch.RuntimeInitError, match=r"(?s)init_runtime\(core_mask=1.*current platform is rk3568"
    ):
        Pool(model, settings=settings, rknnlite=wrong, workers="process")


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_two_contexts_on_one_core_take_turns(setup: tuple[Path, Any, SimulatedNpu], workers: str) -> None:
    """The simulated NPU runs one job per core at a time, whichever context or process submits it."""
    model, settings, sim = setup
    traced = SimulatedNpu(sim.lock_dir, single_core_ms=3.0, trace=True)
    with Pool(
        model, [0, 1], settings=settings, rknnlite=traced, workers=workers, contexts_per_core=2
    ) as pool:  # type: ignore[arg-type]
        assert pool.size == 4
        assert len(list(pool.map(frame(1) for _ in range(40)))) == 40
    jobs: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for trace in Path(sim.lock_dir).glob("trace-*"):
        for line in trace.read_text().splitlines():
            core, start, end = line.split()
            jobs[int(core)].append((float(start), float(end)))
    assert sum(len(spans) for spans in jobs.values()) == 40 and all(jobs.values())
    for spans in jobs.values():
        spans.sort()
        assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
