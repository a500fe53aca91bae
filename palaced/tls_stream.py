"""TLS over a trio stream for peer links, with no scheduler pass of its own on the way out.

Owns: ``TlsStream``, an ``ssl.SSLObject`` between two memory BIOs over a transport stream (TCP).
Every peer connection runs on it: the links (``peers/admission.py``, ``peers/dialing.py``) and
the joiner's side of an enrolment (``enrolment.py``). The contexts and certificates are
``tls.py``'s.

Why not ``trio.SSLStream``: it is general (renegotiation, any protocol version, its own locks),
and each ``send_all`` takes a ``trio.Lock`` whose ``acquire`` yields to the scheduler before the
record reaches the socket. On the path that matters most between two daemons — an event
committed on A, pushed to B, shown to B's watchers — that pass lets whatever else is runnable
go first (the reply to the appending client, say). Measured here (issue 27), one message between
two idle processes took 175–190 µs one way over ``trio.SSLStream`` and 129–137 µs over this.

What it supports is what the links use: TLS 1.3 (the contexts refuse anything older, so there is
no renegotiation), a handshake that the caller awaits before anything else, one receiving task
and any number of sending ones. Records leave in the order they were made: whoever takes bytes
from the outgoing BIO sends them before anyone takes more (one lock, taken without a pass when
free). A failure of TLS or of the transport, or a send interrupted half way (a cancelled send
may have written part of a record), leaves the stream broken: every later call raises
``trio.BrokenResourceError``, as ``trio.SSLStream`` does.
"""

from __future__ import annotations

import ssl
from typing import Any, Final

import trio

__all__ = ["TlsStream"]

# Why 64 KiB: at most four full TLS records per read from the socket; more only sits in memory.
TRANSPORT_CHUNK: Final = 1 << 16
# Why 1 s: a close_notify or an alert is a courtesy; a peer that takes nothing must not hold us.
_COURTESY_S: Final = 1.0


class TlsStream(trio.abc.Stream):
    """TLS over ``transport_stream`` with ``context`` (see the module docstring). Await
    ``do_handshake`` first; then ``send_all`` / ``receive_some`` / ``aclose`` as any trio stream."""

    def __init__(self, transport_stream: trio.abc.Stream, context: ssl.SSLContext, *, server_side: bool,
                 server_hostname: str | None = None) -> None:
        self.transport_stream = transport_stream
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                     server_hostname=server_hostname)
        self._send_lock = trio.StrictFIFOLock()
        self._receiving = False
        self._handshook = False
        self._broken = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "broken" if self._broken else "open" if self._handshook else "new"
        return f"<TlsStream {state} over {self.transport_stream!r}>"

    def getpeercert(self, binary_form: bool = False) -> Any:
        """The peer's certificate (``ssl.SSLObject.getpeercert``), once the handshake is done."""
        return self._ssl.getpeercert(binary_form)

    def _check(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this TLS stream was closed")
        if self._broken:
            raise trio.BrokenResourceError("this TLS stream is broken (an earlier TLS or connection failure)")

    def _failed(self, exc: ssl.SSLError) -> trio.BrokenResourceError:
        self._broken = True
        return trio.BrokenResourceError(f"TLS failed: {exc.reason or exc}")

    async def do_handshake(self) -> None:
        """Run the TLS handshake (once; later calls return at once).

        Raises:
            trio.BrokenResourceError: the handshake failed (its ``__cause__`` is the ``ssl.SSLError``:
                an untrusted certificate, say) or the peer closed the connection meanwhile.
        """
        self._check()
        if self._handshook:
            await trio.lowlevel.checkpoint()
            return
        while True:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                await self._receive_records()
                continue
            except ssl.SSLError as exc:
                error = self._failed(exc)
                await self._send_courtesy()  # the alert tells the peer why
                raise error from exc
            break
        await self._flush()
        self._handshook = True

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and send it; the records are on the socket before the first pass."""
        self._check()
        if not self._handshook:
            await self.do_handshake()
        if not len(data):
            await trio.lowlevel.checkpoint()
            return
        try:
            self._ssl.write(data)
        except ssl.SSLError as exc:
            raise self._failed(exc) from exc
        await self._flush()

    async def wait_send_all_might_not_block(self) -> None:
        self._check()
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to ``max_bytes`` of decrypted data (one record's at most); ``b""`` once the peer
        closed TLS properly.

        Raises:
            trio.BrokenResourceError: TLS failed (a forged or garbled record), or the peer closed
                the connection without closing TLS.
            trio.BusyResourceError: another task is receiving on this stream.
        """
        self._check()
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving on this TLS stream")
        self._receiving = True
        try:
            if not self._handshook:
                await self.do_handshake()
            await trio.lowlevel.checkpoint_if_cancelled()
            while True:
                try:
                    data = self._ssl.read(max_bytes or TRANSPORT_CHUNK)
                except ssl.SSLWantReadError:
                    await self._flush()  # what reading made us owe the peer (a key update's answer)
                    await self._receive_records()
                    continue
                except ssl.SSLZeroReturnError:
                    return b""
                except ssl.SSLError as exc:
                    raise self._failed(exc) from exc
                if self._outgoing.pending:
                    await self._flush()
                return data
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        """Say close_notify (not waiting for the peer's), then close the transport."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if self._handshook and not self._broken:
                try:
                    self._ssl.unwrap()  # queues our close_notify
                except ssl.SSLError:
                    pass
                await self._send_courtesy()
        finally:
            await self.transport_stream.aclose()

    async def _receive_records(self) -> None:
        try:
            data = await self.transport_stream.receive_some(TRANSPORT_CHUNK)
        except BaseException:
            self._broken = True
            raise
        if not data:
            self._broken = True
            raise trio.BrokenResourceError("the peer closed the connection without closing TLS")
        self._incoming.write(data)

    async def _flush(self) -> None:
        """Send what the outgoing BIO holds. Taken and sent under one lock, so records leave in
        the order they were made; free (the usual case), it is taken without a scheduler pass."""
        if not self._outgoing.pending:
            return
        lock = self._send_lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            data = self._outgoing.read()
            if data:
                await self.transport_stream.send_all(data)
        except BaseException:
            self._broken = True  # part of a record may have left: nothing after it would decrypt
            raise
        finally:
            lock.release()

    async def _send_courtesy(self) -> None:
        """Best effort: an alert or a close_notify, never waiting on a peer that takes nothing."""
        try:
            with trio.move_on_after(_COURTESY_S):
                if self._outgoing.pending and not self._send_lock.locked():
                    data = self._outgoing.read()
                    await self.transport_stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass
