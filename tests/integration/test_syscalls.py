"""What a keep-alive request costs in system calls (issue 11).

A request proxied on connections that stay open needs four socket calls:
the client's request read, the upstream write, the upstream answer read,
the client write. HAProxy makes exactly those. A proxy that reads before
the bytes are there adds a receive that returns EAGAIN, and one that waits
for readiness by re-arming epoll adds an epoll_ctl per wait. levee keeps
each cleartext socket's readiness in its worker's readiness set
(src/proxy/readiness.hpp), the client's from its first answer on, so
neither happens. strace, attached to the running levee after the first
request, counts them; the client pauses between requests as a real one
does, which is when a read at once would find nothing.
"""
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import unittest

from harness import Backend, Levee, cluster, tool, wait_until

REQUESTS = 6


def read_answer(s):
    """One HTTP/1.1 answer with a content-length, whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before an answer: %r" % data)
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if not m:
        raise AssertionError("no content-length in %r" % head)
    while len(body) < int(m.group(1)):
        body += s.recv(65536)
    return head


class KeepAliveSyscalls(unittest.TestCase):
    def test_a_kept_alive_request_costs_one_receive_per_socket_and_no_rearm(self):
        strace = tool("strace")
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])])
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        self.addCleanup(s.close)

        def ask(i):
            s.sendall(b"GET /probe-%d HTTP/1.1\r\nHost: app\r\n\r\n" % i)
            head = read_answer(s)
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)

        ask(0)  # the connection's first answer: from here on it is kept open

        trace = tempfile.NamedTemporaryFile(prefix="levee-strace-", suffix=".txt", delete=False)
        self.addCleanup(os.unlink, trace.name)
        err = tempfile.NamedTemporaryFile(prefix="levee-strace-err-", suffix=".txt", delete=False)
        self.addCleanup(os.unlink, err.name)
        tracer = subprocess.Popen([strace, "-f", "-p", str(lv.proc.p.pid), "-o", trace.name,
                                   "-e", "trace=recvfrom,recvmsg,read,sendmsg,sendto,write,writev,epoll_ctl"],
                                  stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(lambda: tracer.poll() is None and tracer.kill())

        def attached():  # "Process N attached with T threads": all of them, before it says so
            with open(err.name) as f:
                return "attached" in f.read()
        wait_until(attached, what="strace attached to levee")

        for i in range(1, REQUESTS + 1):
            # A client that thinks before its next request: levee has long
            # finished with the answer when the request comes.
            ready, _, _ = select.select([s], [], [], 0.02)
            self.assertFalse(ready, "levee sent more than the answer")
            ask(i)

        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=10)
        with open(trace.name) as f:
            lines = f.read().splitlines()

        # The client's socket in levee: the one the requests were read from.
        client_fds = {m.group(1) for m in (re.search(r'recvfrom\((\d+), "GET /probe-', ln) for ln in lines) if m}
        self.assertEqual(len(client_fds), 1, "\n".join(lines[-60:]))
        cfd = client_fds.pop()
        # The backend's: the one the requests were written to.
        up_fds = {m.group(1) for m in (re.search(r'sendmsg\((\d+), .*GET /probe-', ln) for ln in lines) if m}
        self.assertEqual(len(up_fds), 1, "\n".join(lines[-60:]))
        ufd = up_fds.pop()

        def calls(fd, names):
            pat = re.compile(r"\b(%s)\(%s," % ("|".join(names), fd))
            return [ln for ln in lines if pat.search(ln)]

        def rearms(fd):
            return [ln for ln in lines if re.search(r"epoll_ctl\(\d+, EPOLL_CTL_MOD, %s," % fd, ln)]

        reads = calls(cfd, ["recvfrom", "recvmsg", "read"])
        self.assertEqual(len(reads), REQUESTS, "one receive per request on the client's socket:\n" + "\n".join(reads))
        self.assertEqual([ln for ln in reads if "EAGAIN" in ln], [], "a receive found nothing")
        self.assertEqual(len(calls(cfd, ["sendmsg", "sendto", "write", "writev"])), REQUESTS,
                         "one write per answer")
        self.assertEqual(rearms(cfd), [], "an epoll re-arm for the client's socket")
        up_reads = calls(ufd, ["recvfrom", "recvmsg", "read"])
        self.assertEqual([ln for ln in up_reads if "EAGAIN" in ln], [], "a receive found nothing upstream")
        self.assertEqual(rearms(ufd), [], "an epoll re-arm for the backend's socket")


if __name__ == "__main__":
    unittest.main()
