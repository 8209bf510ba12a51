#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A small authoritative DNS server for the resolver's tests: UDP and TCP on one loopback address and
# port, answers read from a JSON zone file at every query (so a test changes them between queries).
"""Usage: dns_server.py ADDRESS ZONE_FILE

Binds UDP and TCP on ADDRESS (an IPv4 loopback address) and one port the kernel picks, then prints
"dns: listening on ADDRESS:PORT" and serves until killed. Each query prints one line
"dns: query NAME TYPE udp|tcp".

ZONE_FILE is JSON, read again at every query: {"name": {"A": [...], "AAAA": [...], "mode": MODE}}.
Names are compared without case and without a trailing dot; a name not in the file is NXDOMAIN.
MODE:
  normal    (default) the A or AAAA records asked for; none of that type is NODATA
  nxdomain  NXDOMAIN (rcode 3)
  nodata    NOERROR with no answer, for every type
  servfail  SERVFAIL (rcode 2)
  silent    no answer at all (the client times out)
  truncate  over UDP, an empty answer with the TC bit set; over TCP, the records
An answer over UDP that would exceed 512 bytes (the query has no EDNS) is sent truncated with
the TC bit set, as a server must; the client then asks again over TCP.
"""
import json
import socket
import struct
import sys
import threading

TYPES = {1: "A", 28: "AAAA"}
UDP_LIMIT = 512


def parse_question(msg):
    """(id, flags, name, qtype, end of the question) of a query; raises ValueError if malformed."""
    if len(msg) < 12:
        raise ValueError("short header")
    qid, flags, qd = struct.unpack("!HHH", msg[:6])
    if qd != 1:
        raise ValueError("not one question")
    labels, i = [], 12
    while True:
        if i >= len(msg):
            raise ValueError("truncated name")
        n = msg[i]
        i += 1
        if n == 0:
            break
        if n & 0xC0 or i + n > len(msg):
            raise ValueError("bad label")
        labels.append(msg[i:i + n].decode("ascii", "replace"))
        i += n
    if i + 4 > len(msg):
        raise ValueError("truncated question")
    qtype, _qclass = struct.unpack("!HH", msg[i:i + 4])
    return qid, flags, ".".join(labels).lower(), qtype, i + 4


def answer(msg, zone_file, transport):
    qid, flags, name, qtype, qend = parse_question(msg)
    print(f"dns: query {name} {TYPES.get(qtype, qtype)} {transport}", flush=True)
    try:
        with open(zone_file) as f:
            zone = {k.lower().rstrip("."): v for k, v in json.load(f).items()}
    except (OSError, ValueError):
        zone = {}
    entry = zone.get(name)
    mode = entry.get("mode", "normal") if entry else "nxdomain"
    if mode == "silent":
        return None
    rcode, records, tc = 0, [], False
    if mode == "nxdomain":
        rcode = 3
    elif mode == "servfail":
        rcode = 2
    elif mode == "truncate" and transport == "udp":
        tc = True
    elif mode in ("normal", "truncate"):
        for addr in entry.get(TYPES.get(qtype, ""), []):
            family = socket.AF_INET if qtype == 1 else socket.AF_INET6
            records.append(socket.inet_pton(family, addr))
    question = msg[12:qend]
    rd = flags & 0x0100

    def build(recs, truncated):
        hdr_flags = 0x8000 | 0x0400 | rd | 0x0080 | (0x0200 if truncated else 0) | rcode  # QR AA RD RA TC
        out = struct.pack("!HHHHHH", qid, hdr_flags, 1, len(recs), 0, 0) + question
        for r in recs:
            out += struct.pack("!HHHIH", 0xC00C, qtype, 1, 5, len(r)) + r
        return out

    reply = build(records, tc)
    if transport == "udp" and len(reply) > UDP_LIMIT:
        reply = build([], True)
    return reply


def serve_udp(sock, zone_file):
    while True:
        msg, peer = sock.recvfrom(65535)
        try:
            reply = answer(msg, zone_file, "udp")
        except ValueError:
            continue
        if reply is not None:
            sock.sendto(reply, peer)


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve_tcp_conn(conn, zone_file):
    with conn:
        while True:
            head = recv_exact(conn, 2)
            if head is None:
                return
            msg = recv_exact(conn, struct.unpack("!H", head)[0])
            if msg is None:
                return
            try:
                reply = answer(msg, zone_file, "tcp")
            except ValueError:
                return
            if reply is None:
                continue  # silent: keep the connection, never answer
            conn.sendall(struct.pack("!H", len(reply)) + reply)


def serve_tcp(sock, zone_file):
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve_tcp_conn, args=(conn, zone_file), daemon=True).start()


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    address, zone_file = sys.argv[1], sys.argv[2]
    for _ in range(50):  # a UDP port whose TCP twin is free too
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((address, 0))
        port = udp.getsockname()[1]
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((address, port))
            break
        except OSError:
            udp.close()
            tcp.close()
    else:
        print("dns: no free port", file=sys.stderr)
        return 1
    tcp.listen(16)
    threading.Thread(target=serve_tcp, args=(tcp, zone_file), daemon=True).start()
    print(f"dns: listening on {address}:{port}", flush=True)
    serve_udp(udp, zone_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
