"""The process's event loop: boot-interface steps written as coroutines, and the
conductor's machines in a migration.

A boot interface may write its steps as coroutines (``async def activate``):
a plugin on an asynchronous BMC client then waits for hundreds of BMCs at once
without a thread each, as MAAS's power drivers do on Twisted. The conductor
runs every machine of a migration as a coroutine on this loop; a step written
as a blocking function (a plugin on sushy) takes one of the loop's threads (at
most ``[conductor] workers``) for as long as the call lasts, and nothing else
does. Hundreds of threads that wake for every BMC answer and every commit cost
more CPU in the kernel than the steps themselves, and queue for the GIL behind
each other.

Blocking code (the API, enrolment, the conformance kit) calls a step with
:func:`call_blocking`, whichever way it is written.
"""

import asyncio
import inspect
import queue
import threading


def new_event_loop():
    """uvloop's loop where it is installed (libuv's timers and hand-overs cost
    the conductor less CPU than asyncio's loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def is_coroutine_step(method):
    """Whether a boot interface wrote ``method`` as a coroutine function."""
    return inspect.iscoroutinefunction(method)


def call_blocking(method, task):
    """Call a step of a boot interface from blocking code and return its result:
    a coroutine step runs on the process's loop (``task.services.step_loop``)."""
    if is_coroutine_step(method):
        return task.services.step_loop.run(method(task))
    return method(task)


class StepLoop:
    """An asyncio loop in a thread of its own, started when first needed."""

    def __init__(self, name="metalboot-steps"):
        self._name = name
        self._loop = None
        self._thread = None
        self._start_lock = threading.Lock()
        # call_in_thread(): its threads, started as needed up to _threads_max
        self._work = queue.SimpleQueue()
        self._threads_lock = threading.Lock()
        self._threads_max = 64
        self._threads_started = 0
        self._threads_idle = 0

    @property
    def loop(self):
        if self._loop is None:
            with self._start_lock:
                if self._loop is None:
                    loop = new_event_loop()
                    thread = threading.Thread(target=self._serve, args=(loop,), name=self._name,
                                              daemon=True)
                    thread.start()
                    self._thread, self._loop = thread, loop
        return self._loop

    def close(self, timeout=5):
        """Stop the loop and its thread (what still runs on it is dropped)."""
        with self._start_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()

    @staticmethod
    def _serve(loop):
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def in_loop(self):
        """Whether the caller runs on the loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, coro, timeout=None):
        """Run ``coro`` on the loop and wait for its result (not from the loop itself:
        it would wait for itself)."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("a blocking call of a coroutine step on the step loop "
                               "would wait for itself; await it instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn, *args):
        """``fn(*args)`` on the loop, from any thread, in the order of the calls."""
        if self.in_loop():
            self._loop.call_soon(fn, *args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def set_threads(self, count):
        """At most ``count`` threads for :meth:`call_in_thread` (a conductor's
        ``workers``: a blocking step holds one for as long as it runs)."""
        self._threads_max = count

    async def call_in_thread(self, fn, *args):
        """``fn(*args)`` in one of this loop's threads, awaited without blocking
        the loop: a blocking plugin step, or anything that reads or writes the
        database directly. Unlike ``run_in_executor``, the answer comes back
        through :meth:`call_soon` and needs no ``concurrent.futures.Future`` (a Condition and an
        RLock per call)."""
        future = self.loop.create_future()
        with self._threads_lock:
            self._work.put((fn, args, future))
            if self._work.qsize() > self._threads_idle \
                    and self._threads_started < self._threads_max:
                self._threads_started += 1
                threading.Thread(target=self._serve_calls, daemon=True,
                                 name=f"{self._name}-thread-{self._threads_started}").start()
        return await future

    def _serve_calls(self):
        while True:
            with self._threads_lock:
                self._threads_idle += 1
            fn, args, future = self._work.get()
            with self._threads_lock:
                self._threads_idle -= 1
            try:
                value = fn(*args)
            except BaseException as exc:
                self.call_soon(_set_exception, future, exc)
            else:
                self.call_soon(_set_result, future, value)

    def outcome(self, outcome):
        """An asyncio future (on the loop, to be awaited there) that is done when
        the group commit's ``outcome`` is: the writer thread hands it over through
        :meth:`call_soon`, so a coroutine waits for a commit without a thread."""
        future = self.loop.create_future()
        outcome.add_done_callback(lambda done: self.call_soon(_settle, future, done))
        return future


def _set_result(future, value):
    if not future.cancelled():
        future.set_result(value)


def _set_exception(future, exc):
    if not future.cancelled():
        future.set_exception(exc)


def _settle(future, outcome):
    try:
        value = outcome.result()
    except BaseException as exc:  # the caller's own error, as a blocking caller gets it
        _set_exception(future, exc)
    else:
        _set_result(future, value)
