"""The engine behind the HTTP server: one thread runs the step loop; each request gets an asyncio
queue of events (new tokens, then its final output). Preprocessing runs in a bounded thread pool,
never on the event loop."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from scheduler.contracts import SamplingParams
from vlm_server.engine import Engine, RequestOutput


@dataclass(frozen=True)
class TokenEvent:
    token_id: int


class AsyncEngine:
    """Thread-safe front of an :class:`Engine`.

    Commands (add, abort) reach the engine thread through a queue, so the scheduler is only ever
    touched by that thread; results come back through ``loop.call_soon_threadsafe``.
    """

    def __init__(self, engine: Engine, preprocess_workers: int = 4) -> None:
        self.engine = engine
        self.pool = ThreadPoolExecutor(max_workers=preprocess_workers, thread_name_prefix="ingest")
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None

    def close(self) -> None:
        self._stop.set()
        self._commands.put(None)
        self.thread.join(timeout=10)
        self.pool.shutdown(wait=False)

    # -- engine thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                block = not self.engine.has_work()
                try:
                    while True:
                        command = self._commands.get(block=block, timeout=0.5 if block else None)
                        block = False
                        if command is not None:
                            command()
                except queue.Empty:
                    pass
                for output in self.engine.finish_refused():
                    self._emit(output.request_id, output)
                if not self.engine.has_work():
                    continue
                tokens, finished = self.engine.step_with_tokens()
                for rid, token in tokens.items():
                    self._emit(rid, TokenEvent(token))
                for output in finished:
                    self._emit(output.request_id, output)
        except BaseException as error:  # noqa: BLE001 - reported by /health and to waiters
            self.error = error
            for rid in list(self._streams):
                self._emit(rid, error)

    def _emit(self, rid: str, event: Any) -> None:
        target = self._streams.get(rid)
        if target is None:
            return
        loop, events = target
        loop.call_soon_threadsafe(events.put_nowait, event)
        if not isinstance(event, TokenEvent):
            self._streams.pop(rid, None)

    # -- event loop side -------------------------------------------------------------------
    async def prepare(self, messages: list[dict[str, Any]]) -> tuple[list[int], Any]:
        """Tokenize and ingest a conversation in the thread pool."""
        loop = asyncio.get_running_loop()

        def work():
            ids, media = self.engine.tokenize_chat(messages)
            if not media:
                return ids, None
            return self.engine.ingestor.build_inputs(ids, media)

        return await loop.run_in_executor(self.pool, work)

    async def generate(
        self,
        token_ids: list[int],
        mm: Any,
        params: SamplingParams,
        request_id: str,
        arrival_time: float | None = None,
    ) -> AsyncIterator[TokenEvent | RequestOutput]:
        """Queue a prepared request; yields token events, then the final output. Leaving the
        iteration early (client gone) aborts the request."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (loop, events)
        self._commands.put(
            lambda: self.engine.add_prepared(token_ids, mm, params, request_id, arrival_time)
        )
        finished = False
        try:
            while True:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise RuntimeError(f"the engine stopped: {event}") from event
                yield event
                if isinstance(event, RequestOutput):
                    finished = True
                    return
        finally:
            if not finished:
                self._streams.pop(request_id, None)
                self._commands.put(lambda: self.engine.abort(request_id))
