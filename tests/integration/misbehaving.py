"""A backend that misbehaves on request: every answer is scripted by the
request path, and every request it receives is recorded, so a test can
tell what reached it.

    /ok/<id>             200, body <id> (keep-alive)
    /<behaviour>/<id>    one of BEHAVIOURS below

It speaks just enough HTTP/1.1 to read requests (Content-Length and
chunked bodies), on a thread per connection, and keeps connections alive
unless a behaviour closes them.
"""
import socket
import threading
import time


def _ok(body, extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def _chunked(body, ext=b"", trailer=b""):
    return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x%s\r\n%s\r\n0\r\n%s\r\n"
            % (len(body), ext, body, trailer))


EVIL = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL"


class Misbehaving:
    # name -> function(conn, rid, method, head, body) -> "keep" or "close"
    def __init__(self, tc):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.requests = []      # (connection number, method, path, body length)
        self.connections = 0
        self.stopped = False
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        tc.addCleanup(self.stop)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def seen(self, path):
        with self.lock:
            return sum(1 for _, _, p, _ in self.requests if p == path)

    def stop(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                n = self.connections
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            t.start()

    @staticmethod
    def _read_head(c, buf):
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                return None, buf
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    @staticmethod
    def _read_body(c, head, buf):
        lines = head.split(b"\r\n")
        fields = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            fields[k.strip().lower()] = v.strip()
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = b""
            while True:
                while b"\r\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        return body, b""
                    buf += chunk
                size_line, _, buf = buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(buf) < size + 2:
                    chunk = c.recv(65536)
                    if not chunk:
                        return body, b""
                    buf += chunk
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    return body, buf
        n = int(fields.get(b"content-length", b"0"))
        while len(buf) < n:
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf[:n], buf[n:]

    def _serve(self, c, n):
        buf = b""
        try:
            while not self.stopped:
                head, buf = self._read_head(c, buf)
                if head is None:
                    return
                method, path = head.split(b" ")[0].decode(), head.split(b" ")[1].decode()
                parts = path.split("/")
                behaviour = parts[1] if len(parts) > 1 else ""
                rid = parts[2].encode() if len(parts) > 2 else b"x"
                if behaviour == "413-early":
                    # Answers before reading the body, then closes.
                    with self.lock:
                        self.requests.append((n, method, path, -1))
                    c.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig\n")
                    time.sleep(0.05)
                    return
                body, buf = self._read_body(c, head, buf)
                with self.lock:
                    self.requests.append((n, method, path, len(body)))
                if getattr(self, "_" + behaviour.replace("-", "_"), None) is None:
                    c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                if getattr(self, "_" + behaviour.replace("-", "_"))(c, rid, method) == "close":
                    return
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass

    # --- behaviours: each sends its answer; "close" ends the connection ----

    def _ok(self, c, rid, method):
        c.sendall(_ok(rid))

    def _extra_now(self, c, rid, method):  # a second response in the same write
        c.sendall(_ok(rid) + EVIL)

    def _extra_later(self, c, rid, method):  # stray bytes in a later write
        c.sendall(_ok(rid))
        time.sleep(0.05)
        c.sendall(EVIL)

    def _head_body(self, c, rid, method):  # a body after the response to HEAD
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL")

    def _no_content_body(self, c, rid, method):  # a body after a 204
        c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n" + EVIL)

    def _not_modified_body(self, c, rid, method):
        c.sendall(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\nEVIL")

    def _switch(self, c, rid, method):  # 101 to a request that asked for no upgrade
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + EVIL)

    def _garbage(self, c, rid, method):
        c.sendall(b"NOT HTTP AT ALL\r\n\r\n")

    def _dup_length(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 4\r\n\r\nEVIL")

    def _length_and_chunked(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nEVIL\r\n0\r\n\r\n")

    def _http10_chunked(self, c, rid, method):
        c.sendall(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nEVIL\r\n0\r\n\r\n")
        return "close"

    def _bad_status(self, c, rid, method):
        c.sendall(b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n")

    def _bare_lf(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")

    def _space_before_colon(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok")

    def _huge_header(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200000 + b"\r\nContent-Length: 0\r\n\r\n")

    def _huge_chunk_ext(self, c, rid, method):  # a chunk header that never ends
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;" + b"e" * 300000)
        time.sleep(2)
        return "close"

    def _huge_trailer(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: " + b"t" * 300000)
        time.sleep(2)
        return "close"

    def _bad_chunk(self, c, rid, method):
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nEVIL\r\n0\r\n\r\n")

    def _chunked_then_extra(self, c, rid, method):
        c.sendall(_chunked(rid) + EVIL)

    def _truncated(self, c, rid, method):  # promises 100 bytes, sends 10, closes
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        return "close"

    def _until_close(self, c, rid, method):  # no length: the body ends at the close (valid)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + rid)
        return "close"

    def _gzip_until_close(self, c, rid, method):  # a coding that is not chunked: also until close
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n" + rid)
        return "close"

    def _close_after_read(self, c, rid, method):  # reads the request, answers nothing
        return "close"

    def _informational(self, c, rid, method):  # 103 and an unsolicited 100 before the answer
        c.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                  b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(rid))

    def _never(self, c, rid, method):
        time.sleep(5)
        return "close"

    def _status_out_of_range(self, c, rid, method):
        c.sendall(b"HTTP/1.1 1000 Huh\r\nContent-Length: 0\r\n\r\n")
