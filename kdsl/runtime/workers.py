"""Parallel NVRTC: a pool of compiler processes, with work stealing by the caller.

NVRTC serialises compilations within one process (two threads compiling take as long as
two compiles in a row; measured with NVRTC 13.0), so building kernels in parallel needs
processes. multiprocessing's spawn would re-import the caller's __main__ (running an
unguarded user script again), so each worker is a plain `python -m kdsl.runtime.workers`
that reads pickled (source, name, options) from stdin and writes results to stdout.

A job nobody has started yet is compiled by the thread that asks for its result, so a
caller never waits behind queued work: only for a compile already running.
"""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from ..errors import CompileError, KdslError

MAX_WORKERS = 8  # NVRTC peaks near 160 MB per compile; more processes rarely pay


class Job:
    def __init__(self, args: tuple):
        self.args = args          # compile_cuda's (source, name, options)
        self.future: Future = Future()
        self.claimed = False      # by a worker or by the caller; guarded by the pool's lock


class Pool:
    def __init__(self, size: int):
        self.size = size
        self._queue: deque[Job] = deque()
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._procs: list[subprocess.Popen] = []

    def submit(self, source: str, name: str, options: list[str]) -> Job:
        job = Job((source, name, list(options)))
        with self._cv:
            self._queue.append(job)
            if len(self._threads) < self.size:
                t = threading.Thread(target=self._serve, name=f"kdsl-nvrtc-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            self._cv.notify()
        return job

    def result(self, job: Job):
        """The job's Compiled (or its CompileError); compiled in this thread if no worker took it."""
        with self._cv:
            mine, job.claimed = not job.claimed, True
        if mine:
            _run(job, lambda: _compile_here(job.args))
        return job.future.result()

    def _serve(self):
        proc = None
        while True:
            if proc is None or proc.poll() is not None:
                # Ready before claiming: a job waits in the queue, where a caller can still take
                # it, rather than behind a process that is starting (~0.1-0.3 s).
                proc = self._start()
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                job = self._queue.popleft()
                if job.claimed:
                    continue
                job.claimed = True
            _run(job, lambda: _ask(proc, job.args))

    def _start(self) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parents[2])  # the worker imports this very kdsl
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen([sys.executable, "-m", "kdsl.runtime.workers"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)
        self._procs.append(proc)
        proc.stdout.read(1)  # the worker says it has loaded NVRTC (or EOF if it could not)
        return proc

    def close(self):
        for p in self._procs:
            if p.poll() is None:
                p.stdin.close()  # the worker exits at end of input
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


def _run(job: Job, compile_fn):
    try:
        job.future.set_result(compile_fn())
    except BaseException as e:
        job.future.set_exception(e)


def _compile_here(args):
    from . import nvrtc
    return nvrtc.compile_cuda(*args)


def _ask(proc: subprocess.Popen, args):
    try:
        pickle.dump(args, proc.stdin)
        proc.stdin.flush()
        kind, payload = pickle.load(proc.stdout)
    except (OSError, EOFError, pickle.UnpicklingError):
        proc.kill()
        return _compile_here(args)  # a dead worker costs time, never a result
    if kind == "ok":
        return payload
    if kind == "compile_error":
        raise CompileError(*payload)
    raise KdslError(f"NVRTC worker failed: {payload}")


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def cpus() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pool() -> Pool:
    """The process-wide pool: one worker per CPU but one (the caller's thread compiles too)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = Pool(max(1, min(MAX_WORKERS, cpus() - 1)))
            atexit.register(_POOL.close)
        return _POOL


def _worker_main():
    from . import nvrtc
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the result stream
    nvrtc.version()  # load libnvrtc now, then say so
    out.write(b"R")
    out.flush()
    inp = sys.stdin.buffer
    while True:
        try:
            args = pickle.load(inp)
        except EOFError:
            return
        try:
            reply = ("ok", nvrtc.compile_cuda(*args))
        except CompileError as e:
            reply = ("compile_error", (e.kernel, e.log, e.options))
        except Exception as e:  # reported to the caller, who raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        pickle.dump(reply, out)
        out.flush()


if __name__ == "__main__":
    _worker_main()
