#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/.

Every seed is written out here, readably, so a reviewer sees what each one
is for; the files in corpus/ are this script's output and are committed.
Run it again after editing (it rewrites only the seeds it names; files it
does not know, such as reproducers saved from fuzzing, are left alone).

HTTP seeds start with the 8 parameter bytes http_driver.hpp reads (header
limit, read buffer, body sink, read sizes); the rest is the byte stream.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def params(head=False, fields=7, limit=30, slack=16, start=16, sink=16, reads=(6, 63, 199)):
    """8 parameter bytes. Defaults: 64 fields, header limit 1024, read
    buffer 65..1153 bytes, body sink 65 bytes, reads of 7, 64 and 200 bytes."""
    return bytes([(fields << 4) | int(head), limit, slack, start, sink, *reads])


TINY = dict(start=0, sink=0, reads=(0, 0, 0))  # 1-byte reads, 1-byte sink: every boundary
LARGE = dict(limit=255, slack=255, start=255, sink=255, reads=(255, 255, 255))


def crlf(s):
    return s.replace("\n", "\r\n").encode()


HTTP_REQUEST = {
    "get": crlf("GET /api/items?id=7 HTTP/1.1\nHost: example.com\nUser-Agent: seed\n\n"),
    "post-content-length": crlf("POST /upload HTTP/1.1\nHost: a\nContent-Length: 11\n\n") + b"hello world",
    "post-content-length-tiny-reads": crlf(
        "POST /upload HTTP/1.1\nHost: a\nContent-Length: 11\n\n") + b"hello world",
    "chunked-ext-trailer": crlf("POST /c HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n"
                                "5;name=value;q=\"x y\"\nhello\n6\n world\n0\nX-Trailer: t\nChecksum: 1\n\n"),
    "pipelined-keep-alive": crlf("GET /1 HTTP/1.1\nHost: a\n\nPOST /2 HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc"
                                 "GET /3 HTTP/1.1\nHost: a\nConnection: close\n\n"),
    "signals": crlf("GET /s HTTP/1.1\nHost: svc.example.com:8080\nX-Criticality: SHEDDABLE_PLUS\n"
                    "x-tenant-id: gmail\nx-api-key: k-123\nx-request-timeout-ms: 250\ngrpc-timeout: 99999999H\n"
                    "x-attempt-count: 2\nx-envoy-attempt-count: 3\ngrpc-previous-rpc-attempts: 1\n"
                    "x-request-id: abc-1\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\nVia: 1.1 edge\n"
                    "Connection: keep-alive, x-hop, close\nx-hop: 1\n\n"),
    "expect-continue": crlf("PUT /p HTTP/1.1\nHost: a\nExpect: 100-continue\nContent-Length: 4\n\n") + b"data",
    "expect-other": crlf("PUT /p HTTP/1.1\nHost: a\nExpect: 200-ok\nContent-Length: 0\n\n"),
    "http10-keep-alive": crlf("GET / HTTP/1.0\nConnection: keep-alive\n\nGET /again HTTP/1.0\n\n"),
    "smuggle-cl-te": crlf("POST / HTTP/1.1\nHost: a\nContent-Length: 4\nTransfer-Encoding: chunked\n\n0\n\n"),
    "smuggle-two-lengths": crlf("POST / HTTP/1.1\nHost: a\nContent-Length: 4\nContent-Length: 5\n\nabcde"),
    "two-hosts": crlf("GET / HTTP/1.1\nHost: a\nHost: b\n\n"),
    "obs-fold": crlf("GET / HTTP/1.1\nHost: a\nX-Long: one\n two\n\n"),
    "upgrade": crlf("GET /ws HTTP/1.1\nHost: a\nConnection: Upgrade\nUpgrade: websocket\n\n"),
    "many-fields": crlf("GET / HTTP/1.1\nHost: a\n" + "".join(f"x-f{i}: {i}\n" for i in range(70)) + "\n"),
    "large-params-chunked": crlf("POST /c HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n"
                                 "1a\nabcdefghijklmnopqrstuvwxyz\n0\n\n"),
    # Reproducers of the stall (issue 12): a chunk extension, or a trailer
    # section, longer than the whole read buffer. The parser asks for more
    # bytes, the buffer has no room left: a connection spins on it.
    "stall-chunk-extension": crlf("POST /c HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n"
                                  "5;" + "e" * 1400 + "\nhello\n0\n\n"),
    "stall-trailer": crlf("POST /c HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n"
                          "5\nhello\n0\nX-Big: " + "t" * 1400 + "\n\n"),
    # Reproducer of the header-limit inconsistency: with a limit of 1024, a
    # 1030-byte head (over by less than its 16-byte start line) passes when
    # read at once and is refused (431) when it arrives in pieces.
    "header-limit-one-read": crlf("GET / HTTP/1.1\nHost: a\nX-Pad: " + "p" * 994 + "\n\n"),
    # An empty chunked body a byte at a time: Boost 1.81's Beast asserts
    # wrongly here (see boost_assert.cpp).
    "chunked-empty-byte-reads": crlf("POST /c HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n0\n\n"),
}
# Per-seed parameters (default: params()).
HTTP_REQUEST_PARAMS = {
    "post-content-length-tiny-reads": params(**TINY),
    "chunked-empty-byte-reads": params(**TINY),
    "large-params-chunked": params(**LARGE),
}

HTTP_RESPONSE = {
    "content-length": crlf("HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 5\n\n") + b"hello",
    "chunked-trailer": crlf("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n4;x=y\nwiki\n5\npedia\n0\nT: 1\n\n"),
    "close-delimited": crlf("HTTP/1.1 200 OK\nConnection: close\n\n") + b"until the peer closes",
    "http10": crlf("HTTP/1.0 200 OK\n\n") + b"old style body",
    "head-answer": crlf("HTTP/1.1 200 OK\nContent-Length: 1234\n\n"),
    "bodyless-statuses": crlf("HTTP/1.1 100 Continue\n\nHTTP/1.1 204 No Content\n\n"
                              "HTTP/1.1 304 Not Modified\nContent-Length: 10\n\nHTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
    "signals-text": crlf("HTTP/1.1 503 Service Unavailable\nendpoint-load-metrics: TEXT cpu_utilization=0.9, "
                         "request_cost.cpu=0.012\nx-levee-no-retry: 1\nContent-Length: 0\n\n"),
    "signals-json": crlf("HTTP/1.1 200 OK\nEndpoint-Load-Metrics: JSON {\"application_utilization\": 0.5, "
                         "\"request_cost\": {\"cpu\": 0.25}}\nx-envoy-overloaded: true\nContent-Length: 0\n\n"),
    "pushback": crlf("HTTP/1.1 503 Unavailable\ngrpc-retry-pushback-ms: -1\nContent-Length: 0\n\n"
                     "HTTP/1.1 503 Unavailable\ngrpc-retry-pushback-ms: 250\nContent-Length: 0\n\n"),
    # A backend's pushback that does not parse means "don't retry" (gRFC A6).
    "pushback-unparseable": crlf("HTTP/1.1 503 Unavailable\ngrpc-retry-pushback-ms: soon\nContent-Length: 0\n\n"),
    "bad-length": crlf("HTTP/1.1 200 OK\nContent-Length: 5x\n\nhello"),
    "stall-chunk-extension": crlf("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n"
                                  "5;" + "e" * 1400 + "\nhello\n0\n\n"),
    "stall-trailer": crlf("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\nhello\n0\nX-Big: " + "t" * 1400 + "\n\n"),
}
HTTP_RESPONSE_PARAMS = {
    "head-answer": params(head=True),
    "chunked-trailer": params(**TINY),
}

SIGNALS = {
    # The first 8 bytes double as a duration (int64 ns) for the format check.
    "grpc-ms": b"100m", "grpc-hours-max": b"99999999H", "grpc-nanos": b"7n", "grpc-spaces": b" 2S ",
    "timeout-ms": b"1500", "timeout-ms-year": b"31536000000", "attempt": b"3", "attempt-big": b"1000001",
    "pushback-negative": b"-1", "pushback-int-max": b"2147483647", "pushback-junk": b"soon",
    "crit-plus": b"CRITICAL_PLUS", "crit-lower": b"\tsheddable_plus ", "crit-bad": b"URGENT",
    "duration-int64-max": struct.pack("<q", 2**63 - 1), "duration-negative": struct.pack("<q", -5),
    "duration-hours": struct.pack("<q", 3 * 3600 * 10**9 + 1),
}

TEXT, JSON, RAW = b"\x00", b"\x01", b"\x02"  # form selector, see fuzz_orca.cpp
ORCA = {
    "text": TEXT + b"cpu_utilization=0.3, mem_utilization=0.8, request_cost.cpu=0.012, named_metrics.x=5",
    "text-camel": TEXT + b"applicationUtilization=0.9,cpuUtilization=0.2",
    "text-bad": TEXT + b"cpu_utilization=-1, request_cost.cpu=nan",
    "text-exp": TEXT + b"request_cost.cpu=1.5e-3, cpu_utilization=1e309",
    "json": JSON + b'{"cpu_utilization": 0.5, "request_cost": {"cpu": 0.02, "db": 3}, '
                   b'"named_metrics": {"cpu": 99}, "tags": [1, "a", {"b": 2}], "ok": true}',
    "json-camel": JSON + b'{"applicationUtilization":0.7,"requestCost":{"cpu":1e-3}}',
    "json-escapes": JSON + b'{"a\\"b": "c\\\\", "cpu_utilization": 0.1}',
    "json-deep": JSON + b"[" * 12 + b"1" + b"]" * 12,
    "raw-bin": RAW + b"BIN CgYIARABGAE=",
    "raw-lowercase": RAW + b"text cpu_utilization=0.4",
    "raw-none": RAW + b"cpu_utilization=0.4",
}


def h2_seeds():
    """Client frames after the preface (fuzz_h2_request skips it), made with
    python3-h2 (scripts/deps.sh --test installs it); 4 parameter bytes in
    front: header-list limit 256 + 64*v, fields 4 + v, read sizes."""
    import h2.config
    import h2.connection

    def frames(build):
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        c.initiate_connection()
        build(c)
        return c.data_to_send()[24:]  # the 24-byte client magic

    base = [(":method", "GET"), (":path", "/items?id=7"), (":scheme", "http"), (":authority", "example.com")]

    def get(c):
        c.send_headers(1, base + [("user-agent", "seed"), ("x-request-id", "abc")], end_stream=True)

    def post(c):
        c.send_headers(1, [(":method", "POST")] + base[1:] + [("content-length", "11"), ("cookie", "a=1"),
                                                             ("cookie", "b=2")])
        c.send_data(1, b"hello world", end_stream=True)

    def grpc(c):
        c.send_headers(1, [(":method", "POST"), (":path", "/pkg.Svc/Call"), (":scheme", "http"),
                           (":authority", "svc"), ("content-type", "application/grpc"), ("te", "trailers"),
                           ("grpc-timeout", "150m"), ("x-criticality", "CRITICAL_PLUS")])
        c.send_data(1, b"\x00\x00\x00\x00\x02hi", end_stream=True)

    def many(c):
        for sid in (1, 3, 5):
            c.send_headers(sid, base + [("x-n", str(sid))], end_stream=True)
        c.reset_stream(3)

    def big(c):
        c.send_headers(1, base + [("x-big", "v" * 3000)], end_stream=True)

    p = bytes([16, 60, 3, 255])
    return {name: p + frames(f) for name, f in
            {"get": get, "post-cookies": post, "grpc": grpc, "streams-and-reset": many, "big-header": big}.items()}


def write(target, seeds, per_seed=None, prefix=None):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        if prefix is not None:
            data = (per_seed or {}).get(name, prefix) + data
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("http_request", HTTP_REQUEST, HTTP_REQUEST_PARAMS, params())
    write("http_response", HTTP_RESPONSE, HTTP_RESPONSE_PARAMS, params())
    write("signals", SIGNALS)
    write("orca", ORCA)
    write("h2_request", h2_seeds())
    # corpus/config/ holds hand-written YAML files; nothing to generate.
