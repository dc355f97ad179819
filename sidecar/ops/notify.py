"""The ``Notices`` port for ``notify:`` targets: a bounded in-memory queue and a background task
in each process, never the delivery path. ``notice`` only enqueues (a full queue drops and
counts); the task claims each (target, kind, provider) in the store (at most one message per
interval across every replica), then POSTs the message, retried with backoff, counted
(``webhook_notifications_total``) and logged. See docs/design.md, "Notifications"."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import aiohttp

from sidecar import __version__
from sidecar.config.model import NotifyConfig, NotifyFormat, NotifyTarget
from sidecar.core.errors import StoreError
from sidecar.core.notices import Notice, NoticeKind, Notices
from sidecar.core.notifying import (
    MAX_TRIES,
    TEST_TYPE,
    Message,
    SignatureFailures,
    TryResult,
    retry_delay,
    target_id,
    try_result,
)
from sidecar.core.ports import NoticeStore
from sidecar.core.signing.forward import forward_signature
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics

log = get_logger("sidecar.notify")

QUEUE_SIZE: Final = 1000  # notices waiting in a process at most; more are dropped and counted
SENDING: Final = 8  # messages being sent at once (a hanging target holds one slot per message)
TRY_TIMEOUT: Final = aiohttp.ClientTimeout(total=10.0, connect=5.0)
ANSWER_READ: Final = 64 * 1024  # a target's answer is read this far, then dropped


@dataclass(frozen=True, slots=True)
class Delivered:
    """How one message to one target ended: sent (2xx) or not, after how many tries, with the
    last answer's status (``None``: no answer) and, when not sent, why."""

    target: str  # the target's host, for output (never its URL: a Slack URL carries a token)
    message_id: str
    sent: bool
    tries: int
    status: int | None
    error: str | None = None


def target_name(target: NotifyTarget) -> str:
    return f"{urlsplit(target.url).hostname or '?'} ({target.format.value})"


class Notifier:
    """Sends notices to the targets of ``config``; ``start`` it on the event loop, ``close`` it
    (drained within a bound) before the loop ends. Without a ``store`` nothing is claimed:
    every notice is sent (``notify test`` needs no database)."""

    def __init__(self, config: NotifyConfig, store: NoticeStore | None, metrics: Metrics, *,
                 clock: Callable[[], float] = time.time, queue_size: int = QUEUE_SIZE) -> None:
        self._targets = config.targets
        self._interval = config.interval
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._queue: asyncio.Queue[tuple[Notice, float]] = asyncio.Queue(queue_size)
        self._slots = asyncio.Semaphore(SENDING)
        self._sending: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- the Notices port: called on the delivery path and from upkeep ---------------------

    def notice(self, notice: Notice) -> None:
        """Queue ``notice`` for the targets that want its kind; never blocks, never raises."""
        try:
            if not any(target.wants(notice.kind) for target in self._targets):
                return
            self._queue.put_nowait((notice, self._clock()))
        except asyncio.QueueFull:
            self._metrics.notifications.labels(NoticeKind(notice.kind).value, "dropped").inc()
            log.warning("notification_dropped", kind=notice.kind, provider=notice.provider,
                        reason="queue_full")
        except Exception:  # a notice is never worth failing its caller for
            log.exception("notice_failed", kind=notice.kind, provider=notice.provider)

    # -- the background task ---------------------------------------------------------------

    def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=TRY_TIMEOUT)
        self._runner = asyncio.create_task(self._run(), name="notifications")

    async def close(self, timeout: float) -> None:
        """Send what is queued for at most ``timeout`` seconds, then abandon the rest (logged)
        and close the client."""
        if self._runner is not None:
            try:
                async with asyncio.timeout(timeout):
                    await self._queue.join()
            except TimeoutError:
                log.warning("notifications_abandoned",
                            count=self._queue.qsize() + len(self._sending), timeout_s=timeout)
            self._runner.cancel()
            for task in self._sending:
                task.cancel()
            await asyncio.gather(self._runner, *self._sending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        while True:
            notice, at = await self._queue.get()
            await self._slots.acquire()
            task = asyncio.create_task(self._send(notice, at), name="notification")
            self._sending.add(task)
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._slots.release()
        self._queue.task_done()
        if not task.cancelled() and task.exception() is not None:
            log.error("notification_crashed", exc_info=task.exception())

    async def _send(self, notice: Notice, at: float) -> None:
        message = Message.of(notice, at)  # here: a bad notice fails alone, not the runner
        kind = NoticeKind(message.type)
        await asyncio.gather(*(self._claimed_send(target, kind, message)
                               for target in self._targets if target.wants(kind)))

    async def _claimed_send(self, target: NotifyTarget, kind: NoticeKind,
                            message: Message) -> None:
        """Send to ``target`` if this process wins the condition's claim for the interval."""
        if self._store is None:
            await self.deliver(target, message)
            return
        try:
            claimed = await self._store.claim_notice(target_id(target.url, target.format),
                                                     kind, message.provider, self._interval)
        except StoreError as exc:
            self._metrics.notifications.labels(kind.value, "failed").inc()
            log.warning("notification_failed", kind=kind.value, provider=message.provider,
                        target=target_name(target), reason="store_error", error=str(exc))
            return
        if not claimed:
            self._metrics.notifications.labels(kind.value, "suppressed").inc()
            log.info("notification_suppressed", kind=kind.value, provider=message.provider,
                     target=target_name(target), interval_s=self._interval)
            return
        await self.deliver(target, message)

    # -- one message to one target, with its retries ---------------------------------------

    async def deliver(self, target: NotifyTarget, message: Message) -> Delivered:
        """POST ``message`` to ``target``: the same id and body on every try, each signed anew
        (standard format), retried on no answer, 5xx and 429 up to ``MAX_TRIES``; counted and
        logged once, by how it ended."""
        message_id = "msg_" + secrets.token_hex(12)
        body = (message.slack_body() if target.format is NotifyFormat.SLACK
                else message.standard_body())
        name = target_name(target)
        for tries in range(1, MAX_TRIES + 1):
            status, retry_after, error = await self._post(target, message_id, body)
            verdict = try_result(status)
            if verdict is TryResult.SENT or verdict is TryResult.REFUSED or tries == MAX_TRIES:
                break
            log.info("notification_retry", kind=message.type, provider=message.provider,
                     target=name, message_id=message_id, tries=tries, status=status,
                     error=error)
            await asyncio.sleep(retry_delay(tries, retry_after))
        sent = verdict is TryResult.SENT
        if status is not None and not sent:
            error = f"answered {status}"
        self._metrics.notifications.labels(message.type, "sent" if sent else "failed").inc()
        emit = log.info if sent else log.warning
        emit("notification_sent" if sent else "notification_failed", kind=message.type,
             provider=message.provider, target=name, message_id=message_id, tries=tries,
             status=status, **({} if sent else {"error": error}))
        return Delivered(name, message_id, sent, tries, status, None if sent else error)

    async def _post(self, target: NotifyTarget, message_id: str, body: bytes
                    ) -> tuple[int | None, float | None, str | None]:
        """One try: the answer's status and Retry-After (seconds), or no status and why."""
        headers = {"Content-Type": "application/json",
                   "User-Agent": f"webhook-sidecar/{__version__}", **dict(target.headers)}
        if target.format is NotifyFormat.STANDARD and target.secret is not None:
            headers.update(forward_signature([target.secret.key], message_id, body,
                                             self._clock()))
        if self._session is None:
            raise RuntimeError("the notifier was not started")
        try:
            async with self._session.post(target.url, data=body, headers=headers,
                                          allow_redirects=False) as answer:
                await answer.content.read(ANSWER_READ)
                return answer.status, _seconds(answer.headers.get("Retry-After")), None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return None, None, type(exc).__name__ + (f": {exc}" if str(exc) else "")

    async def send_test(self, provider: str) -> list[Delivered]:
        """``webhook-sidecar notify test``: one test message to every target, whatever its
        ``events`` and the interval (no claim)."""
        message = Message(TEST_TYPE, provider, {"message": "a test message from "
                                                "webhook-sidecar notify test"}, self._clock())
        return list(await asyncio.gather(*(self.deliver(target, message)
                                           for target in self._targets)))


class SignatureWatch:
    """Counts each provider's deliveries answered 401 for a bad signature (called by the HTTP
    shell, where it counts ``webhook_events_total``) and hands ``notices`` a notice when
    ``notify.signature_failures`` of them fall within its window, in this process."""

    def __init__(self, config: NotifyConfig, notices: Notices, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        count = config.signature_failures.count
        self._failures = (SignatureFailures(count, config.signature_failures.window)
                          if count is not None and config.targets else None)
        self._notices = notices
        self._clock = clock

    def failed(self, provider: str) -> None:
        if self._failures is None:
            return
        notice = self._failures.failed(provider, self._clock())
        if notice is not None:
            self._notices.notice(notice)


def _seconds(value: str | None) -> float | None:
    """A Retry-After in seconds (an HTTP date is not followed: the backoff applies)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
