# The Python side of servery's ASGI adapter (ASGI 3: HTTP and lifespan), compiled once per
# worker and run on the worker's one asyncio loop, in a thread of its own.
#
# Rust never takes the interpreter's lock on its own threads to talk to the loop: it
# queues what happened (a new request, a chunk of body arrived, room freed for the
# response, a client gone) and writes a byte to a socket the loop watches. The loop then
# takes the queue (`take`) and acts. Each request's `recv` and `send_*` are Rust
# functions that never wait: when they cannot proceed they say so, having asked Rust to
# wake this request, and the coroutine waits on a future the wake resolves.

import asyncio
import socket

PENDING = 2
CHUNK = 0
LAST = 1
GONE = 3


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
        loop.add_reader(self.sock.fileno(), self.wake)

    def wake(self):
        try:
            while self.sock.recv(4096):
                pass
        except BlockingIOError:
            pass
        new, woken = self.take()
        for key in woken:
            fut = self.waiters.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        for request in new:
            self.loop.create_task(self.serve(*request))

    def wait(self, ident, kind):
        fut = self.loop.create_future()
        self.waiters[(ident, kind)] = fut
        return fut

    async def serve(self, ident, scope, recv, send_start, send_body, finish):
        scope["state"] = dict(self.state)
        body_done = False

        async def receive():
            nonlocal body_done
            while True:
                if body_done:
                    kind, data = recv(True)
                    if kind == GONE:
                        return {"type": "http.disconnect"}
                    await self.wait(ident, 0)
                    continue
                kind, data = recv(False)
                if kind == CHUNK:
                    return {"type": "http.request", "body": data, "more_body": True}
                if kind == LAST:
                    body_done = True
                    return {"type": "http.request", "body": data, "more_body": False}
                if kind == GONE:
                    body_done = True
                    return {"type": "http.disconnect"}
                await self.wait(ident, 0)

        started = False

        async def send(message):
            nonlocal started
            kind = message["type"]
            if kind == "http.response.start":
                if started:
                    raise RuntimeError("http.response.start sent twice")
                started = True
                send_start(message["status"], list(message.get("headers", ())))
            elif kind == "http.response.body":
                if not started:
                    raise RuntimeError("http.response.body before http.response.start")
                body = message.get("body", b"")
                more = message.get("more_body", False)
                while not send_body(body, more):
                    await self.wait(ident, 1)
            elif kind == "http.response.pathsend":
                raise RuntimeError("http.response.pathsend is not offered by this server")
            else:
                raise RuntimeError("unknown ASGI message type %r" % (kind,))

        try:
            await self.app(scope, receive, send)
        except BaseException as e:
            finish(e)
            if not isinstance(e, Exception):
                raise
        else:
            # A response left unfinished is cut: the client must not wait for it.
            finish(None)


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
