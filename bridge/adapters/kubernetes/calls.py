"""One Kubernetes API call: library errors translated into ``bridge.errors``, transient ones
retried with tenacity (a fixed number of attempts, or as many as fit in a time budget).

A 429 (or 503) that carries ``Retry-After`` waits as long as the API server asked: its priority
and fairness queues say when they will have room, and retrying sooner only fills them again.
A 401 is :class:`~bridge.errors.Unauthorized` and never retried here: the same token fails the
same way; the gateway's :class:`~.credentials.KubeCredentials` re-reads it for the next call."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from bridge.adapters.call_counters import CallCounters, error_kind
from bridge.errors import (
    BackendError,
    BridgeError,
    Conflict,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
    Unauthorized,
)

T = TypeVar("T")

#: The longest Retry-After honoured: a larger hint is a server asking us to give up for now,
#: and the call's own attempts and budget decide that.
MAX_RETRY_AFTER_S = 10.0

#: What the client raises when a call fails: an HTTP status, or the connection itself.
TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


class WatchExpired(BackendError):
    """The watch's resourceVersion is too old (410 Gone): list again and watch from there."""


def translate(e: Exception, what: str) -> BackendError | InvalidInput:
    """The bridge's error for a client error, by HTTP status; ``what`` names the call."""
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        detail = _api_message(e)
        if "exceeded quota" in detail:  # ResourceQuota says no with a 403
            return NoCapacity(f"{what}: {detail}")
        if status == 401:
            return Unauthorized(f"{what}: unauthorized: {detail}")
        if status == 403:
            return Forbidden(f"{what}: forbidden: {detail}")
        if status == 409:
            return Conflict(f"{what}: {detail}")
        if status == 410:
            return WatchExpired(f"{what}: {detail}")
        if status in (400, 422):
            return InvalidInput(f"{what}: rejected by the API server: {detail}")
        if status == 429 or status >= 500 or status == 0:
            return TransientBackendError(f"{what}: HTTP {status}: {detail}")
        return BackendError(f"{what}: HTTP {status}: {detail}")
    return TransientBackendError(f"{what}: {type(e).__name__}: {e}")


def is_not_found(e: BackendError) -> bool:
    """Whether the translated error was the API server's 404."""
    return isinstance(e.__cause__, ApiException) and e.__cause__.status == 404


def _api_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
    except ValueError:
        return str(e.reason)
    return str(body.get("message") or e.reason)


def retry_after_s(error: BaseException | None) -> float | None:
    """The API server's ``Retry-After`` (seconds) on the 429 or 503 behind ``error``, if any."""
    cause = error.__cause__ if error is not None else None
    if not isinstance(cause, ApiException) or cause.status not in (429, 503) or not cause.headers:
        return None
    # The client hands over urllib3's case-insensitive HTTPHeaderDict; a plain dict may not be.
    value = cause.headers.get("Retry-After") or cause.headers.get("retry-after")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None  # an HTTP date: the API server never sends one; back off as usual
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


_backoff = wait_exponential(multiplier=0.2, max=2)


def wait_retry_after(state: RetryCallState) -> float:
    """Tenacity wait: the server's ``Retry-After`` when it sent one, else exponential backoff."""
    error = state.outcome.exception() if state.outcome is not None else None
    hinted = retry_after_s(error)
    return hinted if hinted is not None else _backoff(state)


#: The ``backend`` label of this adapter's calls.
BACKEND = "kubernetes"


def _counted(
    retrying: Callable[[], Retrying], attempt: Callable[[], T], counters: CallCounters | None
) -> T:
    """``attempt()``, retried by ``retrying()`` when it fails transiently; the retries and the
    final error reported to ``counters``.

    The first try runs outside tenacity: a ``Retrying`` made for every call cost 40-70 us of
    GIL-bound CPU in each of a 1,000-pod resume's creates (issue 33). Its failure is handed to
    the ``Retrying`` as its first attempt's, so the waits (``Retry-After``), the attempt count
    and the retries counted are what they would be had tenacity run it."""
    try:
        try:
            return attempt()
        except TransientBackendError as e:
            first: list[TransientBackendError] = [e]

        def again() -> T:
            if first:
                raise first.pop()
            return attempt()

        retried = retrying()
        if counters is not None:
            retried = retried.copy(before_sleep=lambda _state: counters.backend_retry(BACKEND))
        return retried(again)
    except BridgeError as e:
        if counters is not None:
            # A 404 is how a delete or a read learns that a pod is gone: its own label, so the
            # ordinary case does not read as an unexplained BackendError.
            kind = "NotFound" if isinstance(e, BackendError) and is_not_found(e) else error_kind(e)
            counters.backend_error(BACKEND, kind)
        raise


def call(what: str, fn: Callable[[], T], counters: CallCounters | None = None) -> T:
    """``fn()``, its errors translated, transient ones tried up to four times; ``counters``
    hears of each retry and of the error the call ends with."""

    def attempt() -> T:
        try:
            return fn()
        except TRANSPORT_ERRORS as e:
            raise translate(e, what) from e

    def retrying() -> Retrying:
        return Retrying(
            retry=retry_if_exception_type(TransientBackendError),
            stop=stop_after_attempt(4),
            wait=wait_retry_after,
            reraise=True,
        )

    return _counted(retrying, attempt, counters)


def call_within(
    what: str, budget_s: float, fn: Callable[[float], T], counters: CallCounters | None = None
) -> T:
    """Like :func:`call`, but every attempt and the waits between them fit in ``budget_s``:
    ``fn(timeout)`` gets what is left of it as its request timeout."""
    deadline = time.monotonic() + budget_s

    def wait_within_budget(state: RetryCallState) -> float:
        return max(min(wait_retry_after(state), deadline - time.monotonic()), 0.0)

    def attempt() -> T:
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            raise TransientBackendError(f"{what}: no time left in its {budget_s:g} s budget")
        try:
            return fn(remaining)
        except TRANSPORT_ERRORS as e:
            raise translate(e, what) from e

    def retrying() -> Retrying:
        return Retrying(
            retry=retry_if_exception_type(TransientBackendError),
            stop=stop_after_attempt(4) | stop_after_delay(budget_s),
            wait=wait_within_budget,
            reraise=True,
        )

    return _counted(retrying, attempt, counters)
