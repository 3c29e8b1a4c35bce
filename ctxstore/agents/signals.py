"""Signals: a retained value that notifies subscribers, and abort signals for in-flight calls.

`Signal` is the small observable that `signal_history_strategy` publishes a strategy's history through
(UI live views, persistence triggers, metrics). `abortable` runs an awaitable until it finishes or an
abort signal (an `asyncio.Event`, or anything with `is_set()`) is set, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from ..errors import InvalidInput, ModelError, shown

__all__ = ["AbortSignal", "Signal", "SignalHistory", "abortable", "signal_history_strategy"]

T = TypeVar("T")

# How often a signal without an awaitable `wait()` is polled. Only used for duck-typed signals
# (e.g. a threading.Event); asyncio.Event is awaited directly.
_POLL_SECONDS = 0.01


@runtime_checkable
class AbortSignal(Protocol):
    """Anything that says whether an operation should stop: `asyncio.Event`, `threading.Event`, ..."""

    def is_set(self) -> bool: ...


class Signal(Generic[T]):
    """A retained value with subscribers, in the manner of a Preact signal.

    `subscribe(callback)` calls `callback(value)`, or `callback(value, previous)` when it takes two
    arguments, after each change (not at once, as in the reference); it returns a function that
    unsubscribes. Setting the value to the very object it already holds notifies nobody, so a read that
    left the history unchanged is not reported as a change.
    """

    def __init__(self, value: T) -> None:
        self._value = value
        self._subscribers: list[tuple[Callable[..., Any], bool]] = []

    @property
    def value(self) -> T:
        """The current value."""
        return self._value

    @value.setter
    def value(self, value: T) -> None:
        if value is self._value:
            return
        previous, self._value = self._value, value
        # Iterate over a copy: a callback may unsubscribe itself (or others) while being notified.
        for callback, with_previous in list(self._subscribers):
            if with_previous:
                callback(value, previous)
            else:
                callback(value)

    def peek(self) -> T:
        """The current value (kept for parity with signal libraries that track reads)."""
        return self._value

    def subscribe(self, callback: Callable[..., Any]) -> Callable[[], None]:
        """Call `callback(value)` or `callback(value, previous)` after every change; returns unsubscribe."""
        if not callable(callback):
            raise InvalidInput(f"a subscriber must be callable, not {type(callback).__name__}")
        subscriber = (callback, _takes_two(callback))
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(subscriber)

        return unsubscribe

    def __repr__(self) -> str:
        return f"Signal({self._value!r})"


def _takes_two(callback: Callable[..., Any]) -> bool:
    """Whether `callback` can be called with (value, previous)."""
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):  # no signature to read (some builtins): call it with the value only
        return False
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    try:
        signature.bind(None)
    except TypeError:
        return True
    # Both work (a default or *args): pass `previous` only to an explicit second positional parameter.
    params = [p for p in signature.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 2


async def _wait_for(signal: AbortSignal) -> None:
    wait = getattr(signal, "wait", None)
    if isinstance(signal, asyncio.Event) and wait is not None:
        await signal.wait()
        return
    while not signal.is_set():
        await asyncio.sleep(_POLL_SECONDS)


async def abortable(awaitable: Awaitable[T], signal: AbortSignal | None, *, what: str = "model call") -> T:
    """Await `awaitable`, cancelling it and raising `ModelError` if `signal` is set first.

    Cancelling the task that awaits this cancels the inner work too, as a plain `await` would.
    """
    if signal is None:
        return await awaitable
    if signal.is_set():
        # Nothing started yet: close a bare coroutine so Python does not warn it was never awaited.
        close = getattr(awaitable, "close", None)
        if callable(close):
            close()
        raise ModelError(f"{what} aborted before it started: its abort signal is set; clear it to retry")
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_for(signal))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Reached on success, on abort and when our own task is cancelled: never leave either running.
        for task in (work, watcher):
            if not task.done():
                task.cancel()
        await asyncio.gather(work, watcher, return_exceptions=True)
    if work in done:
        return work.result()
    raise ModelError(f"{what} aborted: its abort signal was set while it was in flight")


class SignalHistory(NamedTuple):
    """What `signal_history_strategy` returns: the wrapping strategy and a signal of its history."""

    strategy: Any
    history: Signal[Any]


class _SignalStrategy:
    """A strategy wrapper that publishes the inner strategy's history to a signal."""

    def __init__(self, inner: Any, signal: Signal[Any]) -> None:
        self._inner = inner
        self._signal = signal

    @property
    def inner(self) -> Any:
        """The wrapped strategy."""
        return self._inner

    @property
    def history(self) -> Any:
        """The inner strategy's current history."""
        return self._inner.history

    @history.setter
    def history(self, value: Any) -> None:
        self._inner.history = value
        self._signal.value = self._inner.history

    async def on_append(self, message: Any, ctx: Any) -> None:
        """Delegate to the inner strategy, then publish its history."""
        try:
            await self._inner.on_append(message, ctx)
        finally:
            # Publish even when the inner strategy failed part-way: subscribers see what is true.
            self._signal.value = self._inner.history

    async def on_read(self, ctx: Any) -> Any:
        """Delegate to the inner strategy, then publish its history."""
        try:
            return await self._inner.on_read(ctx)
        finally:
            self._signal.value = self._inner.history

    def __repr__(self) -> str:
        return f"signal_history_strategy({self._inner!r})"


def signal_history_strategy(inner: Any) -> SignalHistory:
    """Wrap a history strategy so that a retained signal follows its history.

    The wrapper delegates everything to `inner` and publishes after `on_append`, after `on_read` and
    after an assignment to `strategy.history`; subscribers are called with the new `MessageHistory`.
    """
    if not (hasattr(inner, "history") and hasattr(inner, "on_read") and hasattr(inner, "on_append")):
        raise InvalidInput(f"inner must be a history strategy (history, on_append, on_read), got {shown(inner)}")
    history: Signal[Any] = Signal(inner.history)
    return SignalHistory(_SignalStrategy(inner, history), history)
