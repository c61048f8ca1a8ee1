"""What a keep-alive request costs in system calls (issue 11).

A request proxied on connections that stay open needs four socket calls:
the client's request read, the upstream write, the upstream answer read,
the client write. HAProxy makes exactly those. A proxy that reads before
the bytes are there adds a receive that returns EAGAIN, and one that waits
for readiness by re-arming epoll adds an epoll_ctl per wait. levee keeps
each cleartext socket's readiness in its worker's readiness set
(src/proxy/readiness.hpp), the client's from its first answer on, so
neither happens. strace, attached to the worker's thread once the
connection is kept open, records a batch of requests; the client pauses
before each, as a real one does, which is when a read at once would find
nothing.

Two things levee rightly does in a slow exchange would re-arm the client's
socket: watching for the client leaving once the backend has taken 10 ms
(kWatchAfter), and parking a connection idle for 100 ms (kParkAfter). So a
batch counts only if every exchange took under 10 ms and every request
came within 100 ms of the one before, as seen by the client (an upper
bound of what levee saw); a batch that did not (a machine too busy to
judge by) is recorded again, up to three times.

Each of those sockets is also in one epoll set only, the readiness set:
Asio registers every socket it opens in its own set, so a socket left
there too would wake two sets per arrival (a second wake-up callback in
the sender's time, a second event for the event loop to sort). The
kernel lists each epoll set's descriptors in /proc/PID/fdinfo.

Nor is the readiness set itself re-armed: it waits in Asio's reactor as a
receive does, so a pass of the event loop costs its epoll_wait and no
EPOLL_CTL_MOD (Asio's readiness wait would re-register it on every pass).
"""
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import Backend, Levee, cluster, tool, wait_until

REQUESTS = 6
PAUSE = 0.005     # the client's think time before each request
WATCH_AFTER = 0.010   # src/proxy/worker.cpp kWatchAfter
PARK_AFTER = 0.100    # src/proxy/worker.cpp kParkAfter


def read_answer(s):
    """One HTTP/1.1 answer with a content-length, whole: its head."""
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


def epoll_sets_holding(pid, fd):
    """How many of process pid's epoll sets have its descriptor fd."""
    n = 0
    for e in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{e}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{e}") as f:
                info = f.read()
        except FileNotFoundError:  # closed meanwhile
            continue
        n += len(re.findall(r"(?m)^tfd:\s*%d\s" % fd, info))
    return n


def worker_thread(pid):
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == "levee-w0":
                return tid
    raise AssertionError("levee has no thread named levee-w0")


class KeepAliveSyscalls(unittest.TestCase):
    def setUp(self):
        self.strace = tool("strace")
        be = Backend(self, service="fixed:0ms")
        self.lv = Levee(self, [cluster("app", [be.address])])
        self.s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=5)
        self.addCleanup(self.s.close)
        self.n = 0

    def ask(self):
        """One request and its answer; how long that took."""
        t0 = time.monotonic()
        self.s.sendall(b"GET /probe-%d HTTP/1.1\r\nHost: app\r\n\r\n" % self.n)
        head = read_answer(self.s)
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
        self.n += 1
        return time.monotonic() - t0

    def traced_batch(self):
        """Records REQUESTS requests with strace on the worker's thread.
        Returns (trace lines, whether the timing let it judge)."""
        fd, out = tempfile.mkstemp(prefix="levee-strace-", suffix=".txt")
        os.close(fd)
        self.addCleanup(os.unlink, out)
        with tempfile.TemporaryFile(mode="w+") as err:
            tracer = subprocess.Popen(
                [self.strace, "-p", worker_thread(self.lv.proc.p.pid), "-o", out,
                 "-e", "trace=recvfrom,recvmsg,read,sendmsg,sendto,write,writev,epoll_ctl"],
                stdout=subprocess.DEVNULL, stderr=err)
            try:
                def attached():
                    if tracer.poll() is not None:
                        err.seek(0)
                        raise AssertionError("strace could not attach: " + err.read())
                    err.seek(0)
                    return "attached" in err.read()
                wait_until(attached, what="strace attached to levee's worker")
                judged = True
                for _ in range(REQUESTS):
                    t0 = time.monotonic()
                    # The client thinks: levee has long finished with the
                    # answer when the request comes. Nothing more arrives.
                    ready, _, _ = select.select([self.s], [], [], PAUSE)
                    self.assertFalse(ready, "levee sent more than the answer")
                    took = self.ask()
                    judged = judged and took < WATCH_AFTER and time.monotonic() - t0 < PARK_AFTER
            finally:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(timeout=10)
        with open(out) as f:
            return f.read().splitlines(), judged

    def test_a_kept_alive_request_costs_one_receive_per_socket_and_no_rearm(self):
        # The first answer keeps the connection open and it joins the set,
        # marked readable (nothing known yet): the second request's read
        # then finds out what is there. Both happen before the trace.
        self.ask()
        self.ask()
        for _ in range(3):
            lines, judged = self.traced_batch()
            if judged:
                break
        else:
            self.fail("three batches in a row had an exchange of 10 ms or more, or a pause of 100 ms: "
                      "the machine is too busy to judge by")

        # The client's socket in levee: the one the requests were read from;
        # the backend's: the one they were written to.
        client_fds = {m.group(1) for m in (re.search(r'recvfrom\((\d+), "GET /probe-', ln) for ln in lines) if m}
        self.assertEqual(len(client_fds), 1, "\n".join(lines))
        cfd = client_fds.pop()
        up_fds = {m.group(1) for m in (re.search(r'(?:sendmsg|sendto)\((\d+), .*GET /probe-', ln) for ln in lines) if m}
        self.assertEqual(len(up_fds), 1, "\n".join(lines))
        ufd = up_fds.pop()

        def calls(fd, names):
            pat = re.compile(r"\b(%s)\(%s," % ("|".join(names), fd))
            return [ln for ln in lines if pat.search(ln)]

        def rearms(fd):
            return [ln for ln in lines if re.search(r"epoll_ctl\(\d+, EPOLL_CTL_MOD, %s," % fd, ln)]

        reads = calls(cfd, ["recvfrom", "recvmsg", "read"])
        self.assertEqual(len(reads), REQUESTS, "one receive per request on the client's socket:\n" + "\n".join(reads))
        self.assertEqual([ln for ln in reads if "EAGAIN" in ln], [], "a receive found nothing")
        answers = calls(cfd, ["sendmsg", "sendto", "write", "writev"])
        self.assertEqual(len(answers), REQUESTS, "one write per answer")
        # A small answer leaves as one buffer, its body copied in behind the
        # head: send(), not sendmsg().
        self.assertEqual([ln for ln in answers if not re.search(r"\bsendto\(", ln)], [], "a small answer not sent with send()")
        self.assertEqual(rearms(cfd), [], "an epoll re-arm for the client's socket")
        # A request head with no body is one buffer: a plain send(), not a
        # sendmsg() whose header and iovec the kernel copies in first.
        up_writes = calls(ufd, ["sendmsg", "sendto", "write", "writev"])
        self.assertEqual(len(up_writes), REQUESTS, "one write per request upstream:\n" + "\n".join(up_writes))
        self.assertEqual([ln for ln in up_writes if not re.search(r"\bsendto\(", ln)], [], "a one-buffer write not sent with send()")
        up_reads = calls(ufd, ["recvfrom", "recvmsg", "read"])
        self.assertEqual([ln for ln in up_reads if "EAGAIN" in ln], [], "a receive found nothing upstream")
        self.assertEqual(rearms(ufd), [], "an epoll re-arm for the backend's socket")
        # Nor for anything else: the readiness set's own wait costs none.
        self.assertEqual([ln for ln in lines if "EPOLL_CTL_MOD" in ln], [], "an epoll re-arm in a kept-alive request")
        # One epoll set each: the readiness set, not Asio's as well.
        pid = self.lv.proc.p.pid
        self.assertEqual(epoll_sets_holding(pid, int(cfd)), 1, "the client's socket is in more than one epoll set")
        self.assertEqual(epoll_sets_holding(pid, int(ufd)), 1, "the backend's socket is in more than one epoll set")


if __name__ == "__main__":
    unittest.main()
