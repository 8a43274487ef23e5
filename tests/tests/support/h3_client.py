"""An HTTP/3 client servery's code has no part in (aioquic): fetches each PATH from
HOST:PORT over one QUIC connection, without verifying the certificate, and prints one JSON
object per response: {"path", "status", "headers": {name: value}, "length", "sha256"}.
Arguments: HOST PORT PATH... An optional `--range BYTES` adds `Range: bytes=BYTES` to every
request. Gives up after 20 s."""
import asyncio
import hashlib
import json
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event):
        for h3_event in self.h3.handle_event(event):
            stream = getattr(h3_event, "stream_id", None)
            if stream not in self.waiting:
                continue
            response, done = self.waiting[stream]
            if isinstance(h3_event, HeadersReceived):
                for name, value in h3_event.headers:
                    if name == b":status":
                        response["status"] = int(value)
                    else:
                        response["headers"][name.decode()] = value.decode()
            elif isinstance(h3_event, DataReceived):
                response["body"].extend(h3_event.data)
            if getattr(h3_event, "stream_ended", False):
                done.set_result(response)

    async def get(self, authority, path, extra):
        stream = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic"),
        ] + extra
        self.h3.send_headers(stream_id=stream, headers=headers, end_stream=True)
        done = asyncio.get_running_loop().create_future()
        self.waiting[stream] = ({"status": None, "headers": {}, "body": bytearray()}, done)
        self.transmit()
        return await done


async def main():
    args = sys.argv[1:]
    extra = []
    if "--range" in args:
        i = args.index("--range")
        extra.append((b"range", f"bytes={args[i + 1]}".encode()))
        del args[i : i + 2]
    host, port, paths = args[0], int(args[1]), args[2:]
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    async with connect(host, port, configuration=config, create_protocol=Client) as client:
        for path in paths:
            response = await client.get(f"{host}:{port}", path, extra)
            body = bytes(response.pop("body"))
            response.update(path=path, length=len(body), sha256=hashlib.sha256(body).hexdigest())
            print(json.dumps(response), flush=True)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 20))
