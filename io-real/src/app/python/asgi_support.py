# The Python side of servery's ASGI adapter (ASGI 3: HTTP, WebSocket and lifespan), compiled once per
# worker and run on the worker's one asyncio loop, in a thread of its own.
#
# Rust never takes the interpreter's lock on its own threads to talk to the loop: it
# queues what happened (a new request, a chunk of body arrived, room freed for the
# response, a client gone) and writes a byte to a socket the loop watches. The loop then
# takes the queue (`take`) and acts. Each HTTP request is one Rust object (`HttpCall`)
# whose `recv`, `send` and `flush` never wait: when they cannot proceed they say so, having asked Rust to
# wake this request, and the coroutine waits on a future the wake resolves.

import asyncio
import socket
from asyncio import Task

# The name every HTTP request's task has (asyncio would number them one by one).
REQUEST_TASK = "servery-http"

PENDING = 2
CHUNK = 0
LAST = 1
GONE = 3

# What an HTTP call's `send` answers (asgi/call.rs names the same numbers).
SEND_TAKEN = 0
SEND_FULL = 1
SEND_HELD = 2

# A WebSocket's `recv` answers (websocket.rs names the same numbers).
WS_TEXT = 0
WS_BINARY = 1
WS_DISCONNECT = 2
WS_PENDING = 3
# What its `send` is asked to do, and what it answers.
WS_ACCEPT = 0
WS_SEND_TEXT = 1
WS_SEND_BINARY = 2
WS_CLOSE = 3
WS_TAKEN = 0
WS_FULL = 1
WS_GONE = 2


class ClientDisconnected(OSError):
    """Raised by a WebSocket's send() once its client has gone (ASGI: an IOError)."""


class Bridge:
    def __init__(self, loop, app, take, log, fd):
        self.loop = loop
        self.app = app
        self.take = take
        self.log = log
        self.waiters = {}
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(False)
        self.state = {}
        self.held = []
        loop.add_reader(self.sock.fileno(), self.wake)

    def wake(self):
        # One read empties the socket: Rust writes a byte only when none is on its way
        # (`signalled`), and clears that in `take` below, after this read. So no second
        # read that would fail with BlockingIOError (an exception per wake).
        try:
            self.sock.recv(4096)
        except BlockingIOError:
            pass
        new, woken, sockets = self.take()
        for key in woken:
            waiting = self.waiters.pop(key, None)
            if waiting is None:
                continue
            if type(waiting) is list:
                for fut in waiting:
                    if not fut.done():
                        fut.set_result(None)
            elif not waiting.done():
                waiting.set_result(None)
        calls = iter(new)
        if self.loop.get_task_factory() is None:
            # What the loop's create_task does without a factory, but named: a task made
            # without a name formats one of its own ("Task-N"), a fifth of what making
            # it costs, for every request.
            loop = self.loop
            for scope, call in zip(calls, calls):
                Task(self.serve(call.ident, scope, call), loop=loop, name=REQUEST_TASK)
        else:
            # An application that set a task factory (an eager one, say) gets it.
            for scope, call in zip(calls, calls):
                self.loop.create_task(self.serve(call.ident, scope, call))
        for socket_args in sockets:
            self.loop.create_task(self.serve_websocket(*socket_args))

    def wait(self, ident, kind):
        # One wake from Rust answers every task waiting on this request for this kind: an
        # application may send (or receive) from two tasks at once, and each must be
        # woken, so a second waiter joins the first instead of replacing it. Each task has
        # a future of its own, so cancelling one leaves the other waiting.
        fut = self.loop.create_future()
        key = (ident, kind)
        waiting = self.waiters.get(key)
        if waiting is None or (type(waiting) is not list and waiting.done()):
            self.waiters[key] = fut
        elif type(waiting) is list:
            waiting.append(fut)
        else:
            self.waiters[key] = [waiting, fut]
        return fut

    def forget(self, ident):
        # A call or socket that ended may leave a waiter no wake will come for.
        self.waiters.pop((ident, 0), None)
        self.waiters.pop((ident, 1), None)

    def hold(self, call):
        # A response head held for its body (SEND_HELD) goes alone once the loop has gone
        # round: one callback per iteration flushes every head held in it, not one
        # callback per request.
        held = self.held
        held.append(call)
        if len(held) == 1:
            self.loop.call_soon(self.flush_held)

    def flush_held(self):
        held = self.held
        self.held = []
        for call in held:
            call.flush_head()

    async def serve(self, ident, scope, call):
        scope["state"] = dict(self.state)
        exchange = HttpExchange(self, ident, call)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BaseException as e:
            call.finish(e)
            if not isinstance(e, Exception):
                raise
        else:
            # A response left unfinished is cut: the client must not wait for it.
            call.finish(None)
        finally:
            if exchange.waited:
                self.forget(ident)

    async def serve_websocket(self, ident, scope, recv, send_op, finish):
        scope["state"] = dict(self.state)
        connected = False
        accepted = False
        closed = False

        async def receive():
            nonlocal connected
            if not connected:
                connected = True
                return {"type": "websocket.connect"}
            while True:
                kind, payload = recv()
                if kind == WS_TEXT:
                    return {"type": "websocket.receive", "text": payload}
                if kind == WS_BINARY:
                    return {"type": "websocket.receive", "bytes": payload}
                if kind == WS_DISCONNECT:
                    code, reason = payload
                    return {"type": "websocket.disconnect", "code": code, "reason": reason}
                await self.wait(ident, 0)

        async def send(message):
            nonlocal accepted, closed
            kind = message["type"]
            if kind == "websocket.accept":
                if accepted or closed:
                    raise RuntimeError("websocket.accept after the handshake was answered")
                op = (WS_ACCEPT, message.get("subprotocol"), list(message.get("headers") or ()))
                accepted = True
            elif kind == "websocket.send":
                if not accepted:
                    raise RuntimeError("websocket.send before websocket.accept")
                if closed:
                    raise RuntimeError("websocket.send after websocket.close")
                data = message.get("bytes")
                if data is not None:
                    op = (WS_SEND_BINARY, data, None)
                elif message.get("text") is not None:
                    op = (WS_SEND_TEXT, message["text"], None)
                else:
                    raise ValueError("websocket.send needs bytes or text")
            elif kind == "websocket.close":
                if closed:
                    raise RuntimeError("websocket.close sent twice")
                closed = True
                op = (WS_CLOSE, message.get("code", 1000), message.get("reason") or "")
            else:
                raise RuntimeError("unknown ASGI WebSocket message type %r" % (kind,))
            while True:
                answer = send_op(*op)
                if answer == WS_TAKEN:
                    return
                if answer == WS_GONE:
                    raise ClientDisconnected("the WebSocket's client has gone")
                await self.wait(ident, 1)

        try:
            await self.app(scope, receive, send)
        except ClientDisconnected:
            # The client left while the application was sending: nothing went wrong here.
            finish(None)
        except BaseException as e:
            finish(e)
            if not isinstance(e, Exception):
                raise
        else:
            finish(None)
        finally:
            self.forget(ident)


class HttpExchange:
    """One HTTP request's `receive` and `send`: one small object per request, rather than
    two closures and a cell for every name they share (each a tracked allocation the
    cyclic garbage collector counts and walks)."""

    __slots__ = ("bridge", "ident", "call", "body_done", "waited")

    def __init__(self, bridge, ident, call):
        self.bridge = bridge
        self.ident = ident
        self.call = call
        self.body_done = False
        # Whether a wait was ever asked for: only then can a waiter be left to forget.
        self.waited = False

    def wait(self, kind):
        self.waited = True
        return self.bridge.wait(self.ident, kind)

    async def receive(self):
        call = self.call
        while True:
            if self.body_done:
                kind, data = call.recv(True)
                if kind == GONE:
                    return {"type": "http.disconnect"}
                await self.wait(0)
                continue
            kind, data = call.recv(False)
            if kind == CHUNK:
                return {"type": "http.request", "body": data, "more_body": True}
            if kind == LAST:
                self.body_done = True
                return {"type": "http.request", "body": data, "more_body": False}
            if kind == GONE:
                self.body_done = True
                return {"type": "http.disconnect"}
            await self.wait(0)

    async def send(self, message):
        # The message checks are the call's (Rust); a head it holds goes with the body
        # that follows, or alone once the loop has gone round.
        call = self.call
        answer = call.send(message)
        if answer == SEND_TAKEN:
            return
        if answer == SEND_HELD:
            self.bridge.hold(call)
            return
        while True:
            await self.wait(1)
            if call.flush():
                return


class Lifespan:
    """The lifespan protocol: startup before the worker is ready, shutdown after it drains."""

    def __init__(self, bridge, mode):
        self.bridge = bridge
        self.mode = mode
        self.events = asyncio.Queue()
        self.startup_done = None
        self.shutdown_done = None
        self.task = None
        self.unsupported = False

    async def receive(self):
        return await self.events.get()

    async def send(self, message):
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self.startup_done.set_result(None)
        elif kind == "lifespan.startup.failed":
            self.startup_done.set_exception(RuntimeError(message.get("message", "startup failed")))
        elif kind == "lifespan.shutdown.complete":
            self.shutdown_done.set_result(None)
        elif kind == "lifespan.shutdown.failed":
            self.shutdown_done.set_exception(RuntimeError(message.get("message", "shutdown failed")))

    async def run(self):
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "state": self.bridge.state,
        }
        try:
            await self.bridge.app(scope, self.receive, self.send)
        except BaseException as e:
            for fut in (self.startup_done, self.shutdown_done):
                if fut is not None and not fut.done():
                    if self.mode == "auto" and fut is self.startup_done:
                        # An application without lifespan support raises on the scope.
                        self.unsupported = True
                        fut.set_result(None)
                    else:
                        fut.set_exception(e)
            if not isinstance(e, Exception):
                raise
        else:
            if self.mode == "on" and self.startup_done is not None and not self.startup_done.done():
                # `--lifespan on` promises the application's startup ran: one that returns
                # from the scope without a word cannot keep it (uvicorn refuses it too).
                self.startup_done.set_exception(RuntimeError(
                    "the application returned from the lifespan scope without completing "
                    "startup (--lifespan on)"))
                return
            # Returned without a word (an application that ignores the lifespan scope):
            # nothing to wait for, at startup or shutdown.
            self.unsupported = True
            for fut in (self.startup_done, self.shutdown_done):
                if fut is not None and not fut.done():
                    fut.set_result(None)

    async def startup(self):
        self.startup_done = self.bridge.loop.create_future()
        self.task = self.bridge.loop.create_task(self.run())
        await self.events.put({"type": "lifespan.startup"})
        await self.startup_done
        return not self.unsupported

    async def shutdown(self):
        if self.task is None or self.unsupported or self.task.done():
            return
        self.shutdown_done = self.bridge.loop.create_future()
        await self.events.put({"type": "lifespan.shutdown"})
        await self.shutdown_done
