#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""New TLS connections through kprism, one after another, while it restarts: how long each waited.

Usage: new_conns.py PORT CA CERT KEY STOPFILE. Until STOPFILE exists (at most 60 s), opens a new
HTTPS connection with the client certificate, does one GET /version and closes it, every 20 ms.
Then prints "new n=N failed=F max_ms=M p50_ms=P" (the time from connect() to the answer)."""

import http.client
import os
import ssl
import sys
import time


def main():
    port, ca, cert, key, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    took, failed = [], 0
    end = time.monotonic() + 60
    while not os.path.exists(stop) and time.monotonic() < end:
        t = time.monotonic()
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        try:
            c.request("GET", "/version", headers={"Connection": "close"})
            r = c.getresponse()
            r.read()
            if r.status == 200:
                took.append((time.monotonic() - t) * 1000)
            else:
                failed += 1
        except (OSError, http.client.HTTPException):
            failed += 1
        finally:
            c.close()
        time.sleep(0.02)
    took.sort()
    p50 = took[len(took) // 2] if took else 0
    print(f"new n={len(took) + failed} failed={failed} max_ms={max(took, default=0):.0f} p50_ms={p50:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
