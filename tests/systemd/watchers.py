#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""N Kubernetes watches through a load balancer, held across its restarts; new connections timed.

Usage: watchers.py PORT N CA CERT KEY DIRECT
Opens N watches of the ConfigMaps in namespace default (`?watch=1&resourceVersion=R`, R from one
list) over TLS with the client certificate to 127.0.0.1:PORT (kprism, or HAProxy beside it).
A writer creates ConfigMap tickP-1, tickP-2, ... (P: this process's pid) every TICK_MS (200) ms on the apiserver itself at
DIRECT (HOST:PORT, not through the balancer); each carries a payload derived from its number.
Every watch checks that its ADDED events are tickP-1, tickP-2, ... in order with the payload intact.
A watch that ends is never reopened, so the counts are of the original connections.
Commands on stdin, one per line, each answered with one line:
  check   waits (at most 20 s) until every open watch has seen the last tick created, then
          "check open=A ended=E lost=L duplicated=D corrupted=C behind=B ticks=K"
          (lost: ticks a watch skipped; corrupted: an event whose payload or JSON was wrong)
  probe   starts opening one new TLS connection through PORT every 20 ms, each with GET /version
          to its response, from a process of its own (this one's loop is busy with N watches):
          "probing"
  probed  stops; "probed n=N failed=F p50_ms=A p99_ms=B max_ms=C" (time from connect() to the
          response's status line; failed: refused, reset, or no answer within 10 s)
  quit    closes everything and exits
Prints "open N" once the N watches have their 200 (or "open-failed ..." and exits 1)."""

import asyncio
import json
import os
import resource
import ssl
import sys
import time

NS = "default"
TICK_MS = int(os.environ.get("TICK_MS", "200"))
PREFIX = f"tick{os.getpid()}-"  # one run's objects: another run against the same store has its own


def payload(k):
    return (f"{k:08d}" * 32)[:256]


class Watch:
    def __init__(self):
        self.last = 0
        self.lost = self.dup = self.corrupted = 0
        self.ended = None


async def read_headers(reader):
    status = await reader.readline()
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    parts = status.split()
    return (int(parts[1]) if len(parts) > 1 else 0), headers


async def request(host, port, ctx, method, path, body=None):
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        writer.write(head.encode() + b"\r\n" + data)
        code, headers = await read_headers(reader)
        if "content-length" in headers:
            rest = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            rest = b"".join([c async for c in chunks(reader)])
        else:
            rest = await reader.read()
        return code, rest
    finally:
        writer.close()


async def chunks(reader):
    """The decoded body of a chunked response, piece by piece."""
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def run_watch(w, reader):
    buf = b""
    try:
        async for data in chunks(reader):
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                    obj = ev["object"]
                    name = obj["metadata"]["name"]
                except (ValueError, KeyError, TypeError):
                    w.corrupted += 1
                    continue
                if ev.get("type") != "ADDED" or not name.startswith(PREFIX):
                    continue
                k = int(name[len(PREFIX):])
                if obj.get("data", {}).get("payload") != payload(k):
                    w.corrupted += 1
                if k == w.last + 1:
                    w.last = k
                elif k <= w.last:
                    w.dup += 1
                else:
                    w.lost += k - w.last - 1
                    w.last = k
        w.ended = "end of stream"
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ValueError) as e:
        w.ended = f"{type(e).__name__}: {e}"


async def open_watch(port, ctx, rv, w, tasks, writers):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(f"GET /api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv} HTTP/1.1\r\n"
                 "Host: 127.0.0.1\r\nAccept: application/json\r\n\r\n".encode())
    code, headers = await read_headers(reader)
    if code != 200 or headers.get("transfer-encoding") != "chunked":
        raise RuntimeError(f"watch answered {code} {headers}")
    writers.append(writer)
    tasks.append(asyncio.create_task(run_watch(w, reader)))


async def probe_once(port, ctx, times, fails):
    t0 = time.monotonic()
    try:
        async def go():
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
            writer.write(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            line = await reader.readline()
            writer.close()
            if not line.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(line)
        await asyncio.wait_for(go(), 10)
        times.append((time.monotonic() - t0) * 1000)
    except (OSError, asyncio.TimeoutError, ssl.SSLError, RuntimeError):
        fails.append(1)


async def main():
    port, n, ca, cert, key, direct = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5],
                                      sys.argv[6])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    dhost, dport = direct.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    code, body = await request(dhost, int(dport), ctx, "GET", f"/api/v1/namespaces/{NS}/configmaps")
    if code != 200:
        print(f"open-failed: list answered {code}", flush=True)
        return 1
    rv = json.loads(body)["metadata"]["resourceVersion"]
    watches = [Watch() for _ in range(n)]
    tasks, writers = [], []
    sem = asyncio.Semaphore(50)

    async def one(w):
        async with sem:
            await open_watch(port, ctx, rv, w, tasks, writers)
    try:
        await asyncio.gather(*(one(w) for w in watches))
    except (OSError, ssl.SSLError, RuntimeError, asyncio.IncompleteReadError) as e:
        print(f"open-failed after {len(writers)}: {type(e).__name__}: {e}", flush=True)
        return 1
    print(f"open {n}", flush=True)

    ticks = 0
    write_errors = []

    async def writer_loop():
        nonlocal ticks
        while True:
            k = ticks + 1
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{PREFIX}{k}", "namespace": NS},
                   "data": {"payload": payload(k)}}
            try:
                c, b = await request(dhost, int(dport), ctx, "POST", f"/api/v1/namespaces/{NS}/configmaps", obj)
                if c == 201:
                    ticks = k
                else:
                    write_errors.append(c)
            except (OSError, ssl.SSLError) as e:
                write_errors.append(str(e))
            await asyncio.sleep(TICK_MS / 1000)
    wtask = asyncio.create_task(writer_loop())

    prober = None

    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while True:
        line = (await stdin.readline()).decode().strip()
        if line in ("quit", ""):
            break
        if line == "check":
            k = ticks
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(w.ended is None and w.last < k for w in watches):
                await asyncio.sleep(0.05)
            live = [w for w in watches if w.ended is None]
            print(f"check open={len(live)} ended={n - len(live)} lost={sum(w.lost for w in watches)} "
                  f"duplicated={sum(w.dup for w in watches)} corrupted={sum(w.corrupted for w in watches)} "
                  f"behind={sum(1 for w in live if w.last < k)} ticks={k} write_errors={len(write_errors)}",
                  flush=True)
            ended = [w.ended for w in watches if w.ended is not None]
            if ended:
                print(f"# first ended: {ended[0]}", file=sys.stderr, flush=True)
        elif line == "probe":
            # In a process of its own, so that the times are not this loop's delay under N watches.
            prober = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--prober", str(port), ca, cert, key,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
            print((await prober.stdout.readline()).decode().strip(), flush=True)
        elif line == "probed":
            if prober is None:
                print("probed n=0 failed=0 p50_ms=0 p99_ms=0 max_ms=0", flush=True)
                continue
            prober.stdin.write(b"stop\n")
            await prober.stdin.drain()
            print((await prober.stdout.readline()).decode().strip(), flush=True)
            await prober.wait()
            prober = None
        else:
            print(f"unknown command {line!r}", flush=True)
    wtask.cancel()
    for w in writers:
        w.close()
    return 0


async def prober_main():
    """--prober PORT CA CERT KEY: one new connection every 20 ms until "stop" on stdin."""
    port, ca, cert, key = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    times, fails, pending = [], [], set()

    async def probe_loop():
        while True:
            t = asyncio.create_task(probe_once(port, ctx, times, fails))
            pending.add(t)
            t.add_done_callback(pending.discard)
            await asyncio.sleep(0.02)
    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    probing = asyncio.create_task(probe_loop())
    print("probing", flush=True)
    await stdin.readline()
    probing.cancel()
    if pending:
        await asyncio.wait(list(pending), timeout=12)
    s = sorted(times)
    pct = (lambda q: s[min(len(s) - 1, int(q * len(s)))] if s else 0)
    print(f"probed n={len(s) + len(fails)} failed={len(fails)} p50_ms={pct(0.5):.1f} p99_ms={pct(0.99):.1f} "
          f"max_ms={(s[-1] if s else 0):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(prober_main() if sys.argv[1:2] == ["--prober"] else main()))
