#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A delaying TCP relay, run inside a stand-in's network namespace in front of it (this kernel
has no netem): accepts on --listen, connects each connection to --to, and holds every chunk of
bytes, in both directions, for half of the current delay before passing it on, so the round
trip grows by the delay. The delay is the number of milliseconds in --delay-file (re-read every
100 ms; missing or empty: 0), and applies to bytes read from then on, on established and new
connections alike. Each time it reads the file it prints "delay N ms wall=T" (T: time.time()),
and every byte it reads after that line is held by the new delay: the harness waits for the
line, then the fault is in place. Order, half-close (FIN) and resets are passed through; at most
1 MiB is queued per direction (backpressure beyond that). With --hold-eof-file, a FIN from the listening
side (the client of the relay) is passed on to --to only after that many more milliseconds (read
when the FIN arrives; missing, empty or 0: at once): to the server behind, a client that has
half-closed is still there and quiet, as a server that does not react to a FIN would be. Prints
"relay listening ADDR" when ready."""

import argparse
import asyncio
import os
import socket
import sys
import time

CHUNK = 65536
QUEUE_CHUNKS = 16


class Delay:
    def __init__(self, path, announce=None):
        self.path = path
        self.ms = 0
        self.mtime = None
        self.announce = announce

    async def watch(self):
        while True:
            try:
                st = os.stat(self.path)
                if st.st_mtime_ns != self.mtime:
                    self.mtime = st.st_mtime_ns
                    with open(self.path) as f:
                        text = f.read().strip()
                    self.ms = int(text) if text else 0
                    if self.announce:
                        print(f"{self.announce} {self.ms} ms wall={time.time():.3f}", flush=True)
            except (OSError, ValueError):
                self.ms = 0
            await asyncio.sleep(0.1)


async def pipe(reader, writer, delay, peer_writer, hold=None):
    loop = asyncio.get_running_loop()
    q = asyncio.Queue(QUEUE_CHUNKS)

    async def read_side():
        try:
            while True:
                data = await reader.read(CHUNK)
                extra = hold.ms / 1000.0 if hold is not None and not data else 0.0
                await q.put((loop.time() + delay.ms / 2000.0 + extra, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await q.put((loop.time(), None))  # reset: pass it on at once

    async def write_side():
        while True:
            due, data = await q.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:  # a reset on the other side: reset this one
                abort(writer)
                abort(peer_writer)
                return
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    r = asyncio.ensure_future(read_side())
    try:
        await write_side()
    except (ConnectionError, OSError):
        abort(writer)
        abort(peer_writer)
    finally:
        r.cancel()


def abort(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:  # SO_LINGER 0: close(2) sends RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
    writer.transport.abort()


async def serve(args, delay, hold):
    to_host, to_port = args.to.rsplit(":", 1)

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            abort(cw)
            return
        await asyncio.gather(pipe(cr, uw, delay, cw, hold), pipe(ur, cw, delay, uw), return_exceptions=True)
        for w in (cw, uw):
            w.close()

    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), reuse_address=True, backlog=1024)
    print(f"relay listening {args.listen}", flush=True)
    asyncio.ensure_future(delay.watch())
    if hold is not None:
        asyncio.ensure_future(hold.watch())
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-file", required=True)
    ap.add_argument("--hold-eof-file", help="milliseconds a FIN from the listening side is held before it is passed on")
    args = ap.parse_args()
    try:
        hold = Delay(args.hold_eof_file) if args.hold_eof_file else None
        asyncio.run(serve(args, Delay(args.delay_file, "delay"), hold))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
