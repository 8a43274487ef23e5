# The Python side of servery's WSGI adapter (PEP 3333), compiled once per worker.
#
# Rust builds each request's environ and moves the bytes; what PEP 3333 defines as Python
# behaviour (start_response's rules, the input stream's read/readline/iteration, the
# iterable's close) is written here, in the language it is specified in. A call's channel
# is a Rust object whose methods `recv`, `send_head`, `send_body`, `send_whole` and
# `send_file` release the interpreter lock while they wait on the client.


class Errors:
    """wsgi.errors: what the application writes goes to servery's log, a line at a time."""

    __slots__ = ("_log", "_pending")

    def __init__(self, log):
        self._log = log
        self._pending = ""

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("wsgi.errors.write() takes a str")
        text = self._pending + s
        *lines, self._pending = text.split("\n")
        for line in lines:
            self._log(line)

    def writelines(self, seq):
        for s in seq:
            self.write(s)

    def flush(self):
        if self._pending:
            self._log(self._pending)
            self._pending = ""


class Input:
    """wsgi.input: the request body as it arrives, never held whole in memory."""

    __slots__ = ("_recv", "_buf", "_eof")

    def __init__(self, recv):
        self._recv = recv
        self._buf = bytearray()
        self._eof = False

    def _fill(self):
        if self._eof:
            return False
        chunk = self._recv()
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    def _take(self, n):
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def read(self, size=-1):
        if size is None or size < 0:
            while self._fill():
                pass
            return self._take(len(self._buf))
        while len(self._buf) < size and self._fill():
            pass
        return self._take(size)

    def readline(self, size=-1):
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0:
                n = end + 1
                break
            if size is not None and 0 <= size <= len(self._buf):
                n = size
                break
            start = len(self._buf)
            if not self._fill():
                n = len(self._buf)
                break
        if size is not None and 0 <= size < n:
            n = size
        return self._take(n)

    def readlines(self, hint=-1):
        lines = []
        total = 0
        while True:
            line = self.readline()
            if not line:
                return lines
            lines.append(line)
            total += len(line)
            if hint is not None and 0 < hint <= total:
                return lines

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line


class EmptyInput:
    """wsgi.input of a request without a body: always at its end, so one serves them all."""

    __slots__ = ()

    def read(self, size=-1):
        return b""

    def readline(self, size=-1):
        return b""

    def readlines(self, hint=-1):
        return []

    def __iter__(self):
        return iter(())


class FileWrapper:
    """wsgi.file_wrapper: a file the server sends itself when it is a regular file."""

    __slots__ = ("filelike", "blksize", "close")

    def __init__(self, filelike, blksize=8192):
        self.filelike = filelike
        self.blksize = blksize
        close = getattr(filelike, "close", None)
        if close is not None:
            self.close = close

    def __iter__(self):
        read = self.filelike.read
        while True:
            data = read(self.blksize)
            if not data:
                return
            yield data


class StartResponse:
    """start_response, with PEP 3333's rules on being called again with exc_info."""

    __slots__ = ("status", "headers", "sent", "_channel")

    def __init__(self, channel):
        self.status = None
        self.headers = None
        self.sent = False
        self._channel = channel

    def __call__(self, status, headers, exc_info=None):
        if exc_info:
            try:
                if self.sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif self.status is not None:
            raise AssertionError("start_response called a second time without exc_info")
        if type(status) is not str:
            raise TypeError("the status must be a str, got %r" % (status,))
        if type(headers) is not list:
            raise TypeError("the headers must be a list, got %r" % (type(headers),))
        self.status = status
        self.headers = headers
        return self.write

    def head(self):
        """Sends the head once; False when the client has gone."""
        if self.sent:
            return True
        if self.status is None:
            raise AssertionError("the application returned without calling start_response")
        self.sent = True
        return self._channel.send_head(self.status, self.headers)

    def write(self, data):
        if type(data) is not bytes:
            raise TypeError("write() takes bytes, got %r" % (type(data),))
        if not self.head() or (data and not self._channel.send_body(data)):
            raise OSError("the client went away")


def call(app, environ, channel):
    """One request: call the application and send what it returns."""
    respond = StartResponse(channel)
    result = app(environ, respond)
    try:
        if not respond.sent and respond.status is not None:
            kind = type(result)
            if (kind is list or kind is tuple) and len(result) == 1 and type(result[0]) is bytes:
                # The whole body at hand: head and body go to the client as one.
                respond.sent = True
                channel.send_whole(respond.status, respond.headers, result[0])
                return
            if kind is FileWrapper and channel.send_file(respond.status, respond.headers, result.filelike):
                respond.sent = True
                return
        send_body = channel.send_body
        for chunk in result:
            if type(chunk) is not bytes:
                raise TypeError("the application yielded %r, not bytes" % (type(chunk),))
            if chunk and not (respond.head() and send_body(chunk)):
                return
        respond.head()
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
