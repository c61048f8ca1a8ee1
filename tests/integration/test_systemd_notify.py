"""levee speaks systemd's notify protocol (Type=notify) without libsystemd:
READY=1 only once its listeners accept, STOPPING=1 when SIGTERM starts the
drain, to a path or an abstract ('@') NOTIFY_SOCKET."""
import json
import os
import signal
import socket
import tempfile
import unittest

from harness import LEVEE, Backend, Proc, cluster, free_port, port_open, wait_until


def fields(datagram):
    return dict(line.split("=", 1) for line in datagram.decode().splitlines() if "=" in line)


class SystemdNotify(unittest.TestCase):
    def start(self, notify_socket):
        be = Backend(self)
        self.port, self.admin_port = free_port(), free_port()
        cfg = {"admin": {"address": "127.0.0.1", "port": self.admin_port}, "workers": 2,
               "drain_timeout": "5s",
               "listeners": [{"name": "main", "address": "127.0.0.1", "port": self.port,
                              "routes": [{"cluster": "app"}]}],
               "clusters": [cluster("app", [be.address])]}
        fd, path = tempfile.mkstemp(prefix="levee-notify-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        self.addCleanup(os.unlink, path)
        env = dict(os.environ, NOTIFY_SOCKET=notify_socket)
        self.proc = Proc([LEVEE, "-c", path], "levee", env=env)
        self.addCleanup(self.proc.stop)

    def bind(self, address):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(s.close)
        s.bind(address)
        s.settimeout(15)
        return s

    def check_lifecycle(self, sock):
        # The first message is READY=1, and by then both ports accept: a
        # unit that systemd calls started can take traffic.
        ready = fields(sock.recv(4096))
        self.assertEqual(ready.get("READY"), "1", ready)
        self.assertTrue(port_open(self.port), "READY=1 sent before the listener accepts")
        self.assertTrue(port_open(self.admin_port), "READY=1 sent before the admin port accepts")
        self.assertIn("STATUS", ready)
        self.proc.signal(signal.SIGTERM)
        stopping = fields(sock.recv(4096))
        self.assertEqual(stopping.get("STOPPING"), "1", stopping)
        self.assertEqual(self.proc.wait(timeout=15), 0, self.proc.output())

    def test_path_socket(self):
        d = tempfile.mkdtemp(prefix="levee-notify-")
        path = os.path.join(d, "notify")
        sock = self.bind(path)
        self.addCleanup(os.rmdir, d)
        self.addCleanup(os.unlink, path)
        self.start(path)
        self.check_lifecycle(sock)

    def test_abstract_socket(self):
        name = f"levee-test-notify-{os.getpid()}-{free_port()}"
        sock = self.bind("\0" + name)
        self.start("@" + name)
        self.check_lifecycle(sock)


if __name__ == "__main__":
    unittest.main()
