"""TLS termination at the edge (issue 13), with real clients: curl and
`openssl s_client`. Certificates are made per test run with the openssl CLI
in a temporary directory (no key material is committed)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from harness import LEVEE, Backend, Levee, cluster, free_port, wait_until


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=30, **kw)


class Pki:
    """A throwaway CA and certificates it signs (ECDSA P-256)."""

    def __init__(self, tc):
        self.dir = tempfile.mkdtemp(prefix="levee-tls-")
        tc.addCleanup(shutil.rmtree, self.dir, True)
        self.ca = self.path("ca.pem")
        self.ca_key = self.path("ca.key")
        self.ca_subject = "/CN=levee test CA " + os.path.basename(self.dir)
        # The extensions a strict verifier wants (Python 3.13's default
        # context sets VERIFY_X509_STRICT): a CA's key usage, key identifiers.
        self._ok(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", self.ca_key, "-out", self.ca, "-days", "2", "-subj", self.ca_subject,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                  "-addext", "subjectKeyIdentifier=hash"])

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ok(self, args):
        r = run(args)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: {r.stderr}")

    def issue(self, name, cn, dns=(), uris=(), client=False):
        """A leaf for `cn` with SANs; returns (cert, key). The cert file holds the chain (leaf, CA)."""
        key, csr, leaf, chain, ext = (self.path(name + s) for s in (".key", ".csr", ".leaf.pem", ".pem", ".ext"))
        self._ok(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", "/CN=" + cn])
        sans = [f"DNS:{d}" for d in dns] + [f"URI:{u}" for u in uris]
        with open(ext, "w") as f:
            if sans:
                f.write("subjectAltName=" + ",".join(sans) + "\n")
            f.write("extendedKeyUsage=" + ("clientAuth" if client else "serverAuth") + "\n")
            f.write("keyUsage=critical,digitalSignature\nsubjectKeyIdentifier=hash\n"
                    "authorityKeyIdentifier=keyid\nbasicConstraints=critical,CA:FALSE\n")
        self._ok(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                  "-out", leaf, "-days", "2", "-extfile", ext])
        with open(chain, "w") as out:
            for p in (leaf, self.ca):
                with open(p) as f:
                    out.write(f.read())
        return chain, key

    def _index(self, entries):
        """An `openssl ca` database: (leaf, revoked) pairs."""
        index = self.path("index.txt")
        with open(index, "w") as f:
            for leaf, revoked in entries:
                serial = run(["openssl", "x509", "-in", leaf, "-noout", "-serial"]).stdout.strip().split("=")[1]
                f.write(f"{'R' if revoked else 'V'}\t301231235959Z\t{'241201000000Z' if revoked else ''}\t"
                        f"{serial}\tunknown\t/CN=x\n")
        return index

    def ocsp_response(self, name, status_good=True):
        """A DER OCSP response for the leaf issued as `name`, signed by the CA."""
        leaf, out = self.path(name + ".leaf.pem"), self.path(name + ".ocsp.der")
        self._ok(["openssl", "ocsp", "-index", self._index([(leaf, not status_good)]), "-rsigner", self.ca,
                  "-rkey", self.ca_key, "-CA", self.ca, "-issuer", self.ca, "-cert", leaf, "-respout", out,
                  "-ndays", "1"])
        return out

    def crl(self, revoked_names):
        """A PEM CRL of the CA listing the leaves issued as `revoked_names`."""
        self._index([(self.path(n + ".leaf.pem"), True) for n in revoked_names])
        cnf, out = self.path("ca.cnf"), self.path("crl.pem")
        with open(self.path("crlnumber"), "w") as f:
            f.write("01\n")
        with open(cnf, "w") as f:
            f.write(f"[ca]\ndefault_ca=d\n[d]\ndatabase={self.path('index.txt')}\n"
                    f"crlnumber={self.path('crlnumber')}\ndefault_md=sha256\ndefault_crl_days=2\n")
        self._ok(["openssl", "ca", "-config", cnf, "-gencrl", "-keyfile", self.ca_key, "-cert", self.ca,
                  "-out", out])
        return out


REQUEST = b"GET / HTTP/1.1\r\nHost: www.test\r\nConnection: close\r\n\r\n"


def s_client(port, *args, servername=None, data=REQUEST):
    """openssl s_client's whole output (stdout and stderr) for one connection
    that sends `data` and reads until levee closes (so that TLS 1.3 session
    tickets, sent after the handshake, have arrived)."""
    cmd = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-ign_eof"] + list(args)
    cmd += ["-servername", servername] if servername else ["-noservername"]
    r = subprocess.run(cmd, input=data, capture_output=True, timeout=30)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def negotiated(out):
    """(version, cipher) of a handshake that completed, or None."""
    m = re.search(r"^(?:New|Reused), (TLSv1\.\d), Cipher is (\S+)", out, re.M)
    return (m.group(1), m.group(2)) if m else None


# curl's option that caps the protocol at TLS 1.2.
TLS12 = ("--tls-max", "1.2")


def peer_subject(port, servername=None):
    """The subject of the certificate levee presents for a server name."""
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-showcerts"]
                       + (["-servername", servername] if servername else ["-noservername"]),
                       input=b"", capture_output=True, timeout=30)
    out = r.stdout.decode(errors="replace")
    for line in out.splitlines():
        if line.startswith("subject="):
            # OpenSSL 3.5 prints "CN=x", 3.0 "CN = x": one spelling.
            return re.sub(r"\s*=\s*", " = ", line)
    raise AssertionError("no certificate in s_client output:\n" + out + r.stderr.decode(errors="replace"))


@unittest.skipUnless(shutil.which("openssl") and shutil.which("curl"), "needs the openssl CLI and curl")
class TlsTermination(unittest.TestCase):
    def setUp(self):
        self.pki = Pki(self)
        self.cert, self.key = self.pki.issue("www", "www.test", dns=["www.test", "localhost"])
        self.be = Backend(self)

    def levee(self, tls, **kw):
        return Levee(self, [cluster("app", [self.be.address])], listener={"tls": tls}, **kw)

    def curl(self, lv, path="/headers", name="www.test", *extra):
        return run(["curl", "-sS", "--cacert", self.pki.ca, "--resolve", f"{name}:{lv.port}:127.0.0.1",
                    f"https://{name}:{lv.port}{path}", "-w", "\n%{http_code} %{http_version}"] + list(extra))

    def test_ocsp_response_is_stapled_for_clients_that_ask(self):
        ocsp = self.pki.ocsp_response("www")
        lv = self.levee({"certificate": self.cert, "key": self.key, "ocsp_response": ocsp})
        rc, out = s_client(lv.port, "-status", servername="www.test")
        self.assertIn("OCSP Response Status: successful", out)
        self.assertIn("Cert Status: good", out)
        self.assertIn("HTTP/1.1 200", out)
        # A client that does not ask gets none.
        rc, out = s_client(lv.port, servername="www.test")
        self.assertNotIn("OCSP Response Status", out)
        # A file that is not an OCSP response is a config error naming it.
        with open(self.pki.path("bad.der"), "wb") as f:
            f.write(b"not der")
        r = run([LEVEE, "--validate", self.write_config(self.pki.path("bad.der"))])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("ocsp_response", r.stderr)
        self.assertIn("is not a DER OCSP response", r.stderr)

    def test_an_ocsp_response_a_client_would_reject_is_a_config_error(self):
        # Revoked, about another certificate, or signed by someone else: each
        # names the file and why, and nothing is stapled.
        cases = []
        cases.append((self.pki.ocsp_response("www", status_good=False), "says the certificate is revoked"))
        self.pki.issue("other", "other.test", dns=["other.test"])
        cases.append((self.pki.ocsp_response("other"), "is not about this certificate"))
        stranger = Pki(self)
        stranger.issue("www", "www.test", dns=["www.test"])
        cases.append((stranger.ocsp_response("www"), "is not"))  # another CA: neither signed nor about it
        for der, why in cases:
            r = run([LEVEE, "--validate", self.write_config(der)])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("ocsp_response", r.stderr)
            self.assertIn(why, r.stderr)

    def write_config(self, ocsp):
        path = self.pki.path("levee.yaml")
        with open(path, "w") as f:
            json.dump({"listeners": [{"port": free_port(), "address": "127.0.0.1", "routes": [{"cluster": "app"}],
                                      "tls": {"certificate": self.cert, "key": self.key, "ocsp_response": ocsp}}],
                       "clusters": [{"name": "app", "endpoints": [self.be.address]}]}, f)
        return path

    def test_certificate_files_are_loaded_again_when_they_change(self):
        lv = self.levee({"certificate": self.cert, "key": self.key})
        self.assertIn("www.test", peer_subject(lv.port, "www.test"))
        # A renewal replaces both files (as cert-manager or a secret volume
        # does): new connections get the new certificate, with no reload.
        renewed, renewed_key = self.pki.issue("renewed", "renewed.test", dns=["www.test"])
        os.replace(renewed_key, self.key)
        os.replace(renewed, self.cert)
        wait_until(lambda: "renewed.test" in peer_subject(lv.port, "www.test"), what="the renewed certificate served")
        self.assertEqual(lv.metric("levee_runtime_rebuilds_total", result="ok"), 1)
        self.assertEqual(lv.metric("levee_config_reloads_total"), 0)
        # A broken file: the rebuild fails, is counted, and the certificate
        # in use stays.
        with open(self.cert + ".tmp", "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        os.replace(self.cert + ".tmp", self.cert)
        wait_until(lambda: lv.metric("levee_runtime_rebuilds_total", result="error") == 1, what="the failed rebuild")
        self.assertIn("renewed.test", peer_subject(lv.port, "www.test"))
        rc, out = s_client(lv.port, servername="www.test")
        self.assertIn("HTTP/1.1 200", out)

    def test_curl_over_https_is_proxied(self):
        lv = self.levee({"certificate": self.cert, "key": self.key})
        r = self.curl(lv)
        self.assertEqual(r.returncode, 0, r.stderr)
        body, _, status = r.stdout.rpartition("\n")
        self.assertEqual(status, "200 1.1")
        self.assertIn("host: www.test", body.lower())
        # Keep-alive over TLS: two requests on one connection, one handshake.
        r = run(["curl", "-sS", "--cacert", self.pki.ca, "--resolve", f"www.test:{lv.port}:127.0.0.1",
                 f"https://www.test:{lv.port}/", f"https://www.test:{lv.port}/", "-o", "/dev/null", "-o", "/dev/null",
                 "-w", "%{http_code} %{num_connects}\n"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split("\n")[:2], ["200 1", "200 0"])

    def test_a_kept_alive_connection_idle_past_parking_serves_again(self):
        # levee parks a connection idle for 100 ms (frees its buffers, and its
        # coroutine rests until the socket is readable); the TLS session must
        # survive that without a second handshake.
        import http.client
        import ssl
        lv = self.levee({"certificate": self.cert, "key": self.key})
        ctx = ssl.create_default_context(cafile=self.pki.ca)
        c = http.client.HTTPSConnection("127.0.0.1", lv.port, context=ctx, timeout=10)
        c._context.check_hostname = False  # the certificate names www.test, we dial the address
        for i in range(3):
            if i:
                time.sleep(0.3)  # the idle spell under test, not a synchronisation
            c.request("GET", "/", headers={"Host": "www.test"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
        c.close()
        self.assertEqual(lv.metric("levee_tls_handshakes_total", result="full"), 1)

    def test_cleartext_on_a_tls_listener_gets_no_http_answer(self):
        lv = self.levee({"certificate": self.cert, "key": self.key})
        with socket.create_connection(("127.0.0.1", lv.port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        self.assertNotIn(b"HTTP/1.1", got)
        # and the listener still serves TLS
        self.assertEqual(self.curl(lv, "/").returncode, 0)

    def test_alpn_tls_versions_and_ciphers(self):
        lv = self.levee({"certificate": self.cert, "key": self.key})
        rc, out = s_client(lv.port, "-alpn", "h2,http/1.1", servername="www.test")
        self.assertIn("ALPN protocol: http/1.1", out)
        self.assertEqual(negotiated(out)[0], "TLSv1.3")
        self.assertIn("HTTP/1.1 200", out)
        rc, out = s_client(lv.port, "-alpn", "h2", servername="www.test")  # nothing in common: no ALPN, still served
        self.assertIn("No ALPN negotiated", out)
        self.assertIn("HTTP/1.1 200", out)
        rc, out = s_client(lv.port, "-tls1_2", servername="www.test")
        version, cipher = negotiated(out)
        self.assertEqual(version, "TLSv1.2")
        self.assertRegex(cipher, r"^ECDHE-ECDSA-(AES128-GCM-SHA256|AES256-GCM-SHA384|CHACHA20-POLY1305)$")
        # TLS 1.1 and 1.0 are refused (at security level 0 the client offers them).
        for old in ("-tls1_1", "-tls1"):
            rc, out = s_client(lv.port, old, "-cipher", "DEFAULT:@SECLEVEL=0", servername="www.test")
            self.assertNotEqual(rc, 0, old)
            self.assertIsNone(negotiated(out), out)
            self.assertNotIn("HTTP/1.1 200", out)
        # A TLS 1.2 client offering only CBC without forward secrecy is refused.
        rc, out = s_client(lv.port, "-tls1_2", "-cipher", "AES128-SHA", servername="www.test")
        self.assertNotEqual(rc, 0)
        self.assertIsNone(negotiated(out), out)

    def test_sni_chooses_among_certificates_with_a_default(self):
        other, other_key = self.pki.issue("api", "api.test", dns=["api.test", "*.api.test"])
        lv = self.levee({"certificates": [{"certificate": self.cert, "key": self.key},
                                          {"certificate": other, "key": other_key}]})
        self.assertIn("CN = api.test", peer_subject(lv.port, "api.test"))
        self.assertIn("CN = api.test", peer_subject(lv.port, "v1.api.test"))   # wildcard, one label
        self.assertIn("CN = www.test", peer_subject(lv.port, "a.v1.api.test"))  # not two labels: the default
        self.assertIn("CN = www.test", peer_subject(lv.port, "www.test"))
        self.assertIn("CN = www.test", peer_subject(lv.port, "unknown.example"))
        self.assertIn("CN = www.test", peer_subject(lv.port))                   # no SNI: the default
        # curl verifies the chosen certificate against the name it asked for.
        r = self.curl(lv, "/", "v1.api.test")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.endswith("200 1.1"), r.stdout)

    def test_explicit_names_override_the_certificate_names(self):
        other, other_key = self.pki.issue("alt", "alt.test", dns=["alt.test"])
        lv = self.levee({"certificates": [{"certificate": self.cert, "key": self.key},
                                          {"certificate": other, "key": other_key, "names": ["Special.Example"]}]})
        self.assertIn("CN = alt.test", peer_subject(lv.port, "special.example"))
        self.assertIn("CN = www.test", peer_subject(lv.port, "alt.test"))

    def test_sessions_resume(self):
        lv = self.levee({"certificate": self.cert, "key": self.key})
        for version in ("-tls1_3", "-tls1_2"):
            sess = self.pki.path("sess" + version)
            rc, out = s_client(lv.port, version, "-sess_out", sess, servername="www.test")
            self.assertTrue(out.startswith("CONNECTED") and "New, TLSv1" in out, out)
            # Resumed again and again, each time from the session the last
            # connection left: a TLS 1.3 client uses a ticket once (RFC 8446
            # C.4), so levee must send a fresh one after each resumption, or
            # every other connection is a full handshake.
            # (s_client writes -sess_out only when a ticket arrives.) TLS 1.2
            # clients keep a session for as long as it resumes.
            for i in range(3):
                fresh = f"{sess}.{i}"
                rc, out = s_client(lv.port, version, "-sess_in", sess, "-sess_out", fresh, servername="www.test")
                self.assertIn("Reused, " + {"-tls1_3": "TLSv1.3", "-tls1_2": "TLSv1.2"}[version], out)
                self.assertIn("HTTP/1.1 200", out)
                if version == "-tls1_3":
                    self.assertTrue(os.path.exists(fresh), f"no ticket after resumption {i + 1}")
                    sess = fresh

    def tls_connect(self, lv, session=None):
        """A TLS 1.2 handshake from Python's ssl (sessions resume at once in
        1.2); the socket, or None when levee refused the handshake."""
        if not hasattr(self, "_client_ctx"):  # one context: a session resumes only under the one it came from
            self._client_ctx = ssl.create_default_context(cafile=self.pki.ca)
            self._client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx = self._client_ctx
        raw = socket.create_connection(("127.0.0.1", lv.port), timeout=10)
        try:
            return ctx.wrap_socket(raw, server_hostname="www.test", session=session)
        except (ssl.SSLError, ConnectionResetError):
            raw.close()
            return None

    def test_a_reload_does_not_refill_the_handshake_budget(self):
        # A bucket of one token, refilled every 20 s: spent, then a reload.
        # The listener's slot keeps the bucket, so the next full handshake,
        # right after the reload, is still refused (a fresh bucket would
        # let a flood through at every reload).
        lv = self.levee({"certificate": self.cert, "key": self.key, "handshake_rate": 0.05})
        first = self.tls_connect(lv)
        self.assertIsNotNone(first)
        first.close()
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: json.loads(lv.admin_get("/admin/info")[1])["generation"] == 2, what="generation 2")
        self.assertIsNone(self.tls_connect(lv))
        # Counted as levee closes the refused connection, which may be just
        # after the client has seen the alert: wait for it, then check it
        # is the only one.
        wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="refused") >= 1, what="the refusal counted")
        self.assertEqual(lv.metric("levee_tls_handshakes_total", result="refused"), 1)

    def test_handshakes_are_shed_under_load_only_while_established_clients_are_served(self):
        # A threshold the executor load is always above: the load rule applies
        # whenever it has someone to protect. Requests themselves are never
        # shed and never told to close (an ASan build's load passes the
        # default thresholds): only handshakes are under test.
        lv = self.levee({"certificate": self.cert, "key": self.key, "shed_handshakes_above": 1e-9},
                        extra={"self_protection": {
                            "time_constant": "20ms", "sample_interval": "1ms", "close_connections_above": 0,
                            "thresholds": {"SHEDDABLE": 50, "SHEDDABLE_PLUS": 50, "CRITICAL": 50, "CRITICAL_PLUS": 50}}})
        wait_until(lambda: lv.metric("levee_executor_load") > 1e-9, what="a load above the threshold")

        def one_request(sock, close=True):
            sock.sendall(REQUEST if close else REQUEST.replace(b"Connection: close", b"Connection: keep-alive"))
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"ok\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            self.assertIn(b"HTTP/1.1 200", data)

        # Every client is new (a mass reconnect): nothing to protect, so every
        # full handshake is completed.
        session = None
        for _ in range(10):
            s = self.tls_connect(lv)
            self.assertIsNotNone(s, "a new client refused with no established one to protect")
            one_request(s)
            session = s.session
            s.close()
        self.assertEqual(lv.metric("levee_tls_handshakes_total", result="refused"), 0)
        # A client served and kept open: new full handshakes are now shed...
        kept = self.tls_connect(lv, session=session)
        self.assertIsNotNone(kept)
        one_request(kept, close=False)

        def refused():
            s = self.tls_connect(lv)
            if s is not None:
                s.close()
            return s is None
        wait_until(refused, what="a full handshake shed while an established client is served")
        # ...a resumption still gets in...
        again = self.tls_connect(lv, session=session)
        self.assertIsNotNone(again)
        self.assertTrue(again.session_reused)
        again.close()
        # ...and once that client has gone, new clients are taken again.
        kept.close()

        def admitted():
            s = self.tls_connect(lv)
            if s is not None:
                s.close()
            return s is not None
        wait_until(admitted, what="full handshakes completed again with no one left to protect")

    def test_full_handshakes_are_rate_limited_and_resumptions_preferred(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "handshake_rate": 2})
        first = self.tls_connect(lv)
        self.assertIsNotNone(first)
        session = first.session
        first.close()
        # A burst of new full handshakes: the bucket holds 2 (a second's
        # worth) and refills at 2/s, so at most 1 + 2/s x elapsed more pass.
        t0 = time.monotonic()
        results = [self.tls_connect(lv) for _ in range(10)]
        elapsed = time.monotonic() - t0
        admitted = sum(1 for r in results if r is not None)
        for r in results:
            if r is not None:
                r.close()
        self.assertLessEqual(admitted, 1 + int(2 * elapsed) + 1, elapsed)
        self.assertGreaterEqual(admitted, 1)  # the burst's second token
        # Each refusal is counted as levee closes that connection, which may
        # be just after the client saw the alert.
        wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="refused") >= 10 - admitted,
                   what="the refusals counted")
        self.assertEqual(lv.metric("levee_tls_handshakes_total", result="refused"), 10 - admitted)
        # With the bucket empty, a client resuming its session still gets in.
        again = self.tls_connect(lv, session=session)
        self.assertIsNotNone(again)
        self.assertTrue(again.session_reused)
        again.sendall(REQUEST)
        self.assertIn(b"HTTP/1.1 200", again.recv(4096))
        again.close()
        self.assertGreaterEqual(lv.metric("levee_tls_handshakes_total", result="resumed"), 1)
        # A ticket this listener did not make (another instance's: its key
        # name is unknown here) buys no exemption: refused like a full one.
        other = self.levee({"certificate": self.cert, "key": self.key})
        foreign = self.tls_connect(other)
        foreign_session = foreign.session
        foreign.close()
        refused = lv.metric("levee_tls_handshakes_total", result="refused")
        for _ in range(3):  # empties what the bucket refilled meanwhile
            c = self.tls_connect(lv)
            if c is not None:
                c.close()
        self.assertIsNone(self.tls_connect(lv, session=foreign_session))
        wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="refused") > refused,
                   what="the foreign ticket's refusal counted")

    def test_session_tickets_survive_a_reload_and_rotate(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "session_ticket_rotation": "1s",
                         "session_timeout": "1h"})
        first = self.tls_connect(lv)
        session = first.session
        first.close()
        self.assertTrue(session.has_ticket)
        # A reload builds new TLS contexts; the listener's ticket keys stay.
        c = http.client.HTTPConnection("127.0.0.1", lv.admin_port, timeout=10)
        c.request("POST", "/admin/reload", body=b"")
        self.assertEqual(c.getresponse().status, 200)
        c.close()
        again = self.tls_connect(lv, session=session)
        self.assertTrue(again.session_reused)
        again.close()
        # Keys rotate every second; an hour's session_timeout would need
        # more keys than the 4 kept. A ticket from one rotation ago still
        # resumes (and is renewed); one whose key is 4 rotations old is not
        # taken (a full handshake), though its session has not expired.
        def rotations():
            return lv.metric("levee_tls_ticket_key_rotations_total")
        fresh = self.tls_connect(lv)
        old, kept = fresh.session, fresh.session
        fresh.close()
        start = rotations()
        wait_until(lambda: rotations() >= start + 1, what="a rotation")
        again = self.tls_connect(lv, session=kept)
        self.assertTrue(again.session_reused)
        again.close()
        wait_until(lambda: rotations() >= start + 4, what="four rotations")
        late = self.tls_connect(lv, session=old)
        self.assertFalse(late.session_reused)
        late.close()

    def test_a_shared_ticket_key_file_lets_instances_resume_each_other(self):
        keys = self.pki.path("ticket.keys")
        with open(keys, "wb") as f:
            f.write(os.urandom(160))  # two keys: the first encrypts
        tls = {"certificate": self.cert, "key": self.key, "session_ticket_keys": keys}
        a, b = self.levee(tls), self.levee(tls)
        first = self.tls_connect(a)
        session = first.session
        first.close()
        other = self.tls_connect(b, session=session)
        self.assertTrue(other.session_reused)
        other.close()
        # A file that is not whole keys is a config error naming it.
        with open(keys, "wb") as f:
            f.write(os.urandom(79))
        r = run([LEVEE, "--validate", self.write_config_with(tls)])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("session_ticket_keys", r.stderr)

    def test_a_failed_reload_keeps_the_ticket_keys_in_use(self):
        # A reload that names a new key file and then fails (a new listener
        # whose port is taken) must not have replaced the keys: sessions
        # made before it still resume.
        lv = self.levee({"certificate": self.cert, "key": self.key})
        first = self.tls_connect(lv)
        session = first.session
        first.close()
        keys = self.pki.path("new.keys")
        with open(keys, "wb") as f:
            f.write(os.urandom(80))
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["listeners"][0]["tls"]["session_ticket_keys"] = keys
        cfg["listeners"].append({"name": "second", "address": "127.0.0.1", "port": taken.getsockname()[1],
                                 "routes": [{"cluster": "app"}]})
        tmp = lv.config_path + ".new"
        with open(tmp, "w") as f:
            json.dump(cfg, f)
        os.replace(tmp, lv.config_path)
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: lv.metric("levee_config_reloads_total", result="error") == 1, what="the reload refused")
        again = self.tls_connect(lv, session=session)
        self.assertTrue(again.session_reused)
        again.close()

    def write_config_with(self, tls):
        path = self.pki.path("levee-keys.yaml")
        with open(path, "w") as f:
            json.dump({"listeners": [{"port": free_port(), "address": "127.0.0.1", "routes": [{"cluster": "app"}],
                                      "tls": tls}],
                       "clusters": [{"name": "app", "endpoints": [self.be.address]}]}, f)
        return path

    def test_handshakes_in_progress_are_capped(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "max_handshakes": 2})
        # Connections that never send a hello hold no place...
        silent = [socket.create_connection(("127.0.0.1", lv.port), timeout=10) for _ in range(3)]
        c = self.tls_connect(lv)
        self.assertIsNotNone(c)
        c.close()
        # ...two that sent their hello and stopped (never finishing) hold both.
        stalled = []
        for _ in range(2):
            # A client hello made in memory and sent by hand: the server's
            # answer is never read, so the handshake cannot finish (a real
            # client socket, fast enough, would finish it on its own).
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = self._client_ctx.wrap_bio(incoming, outgoing, server_hostname="www.test")
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                pass
            raw = socket.create_connection(("127.0.0.1", lv.port), timeout=10)
            raw.sendall(outgoing.read())
            stalled.append(raw)
        wait_until(lambda: self.tls_connect(lv) is None, what="a handshake refused at the cap")
        # Counted as levee closes the refused connection, which may be just
        # after the client has seen the alert.
        wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="refused") >= 1, what="the refusal counted")
        for s in silent + stalled:
            s.close()
        def admitted():
            c = self.tls_connect(lv)
            if c is not None:
                c.close()
            return c is not None
        wait_until(admitted, what="a handshake admitted once the places are free")

    def test_tickets_off_still_resumes_from_the_cache(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "session_tickets": False})
        sess = self.pki.path("sess-cache")
        rc, out = s_client(lv.port, "-tls1_2", "-sess_out", sess, servername="www.test")
        self.assertNotIn("TLS session ticket:", out)
        rc, out = s_client(lv.port, "-tls1_2", "-sess_in", sess, servername="www.test")
        self.assertIn("Reused, TLSv1.2", out)
        # The cache is the listener's, not the TLS context's: a reload (new
        # contexts) keeps every session in it.
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: json.loads(lv.admin_get("/admin/info")[1])["generation"] == 2, what="generation 2")
        rc, out = s_client(lv.port, "-tls1_2", "-sess_in", sess, servername="www.test")
        self.assertIn("Reused, TLSv1.2", out)

    def test_a_silent_client_is_closed_after_the_handshake_timeout(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "handshake_timeout": "300ms"})
        silent = socket.create_connection(("127.0.0.1", lv.port), timeout=10)
        slow = socket.create_connection(("127.0.0.1", lv.port), timeout=10)
        slow.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
        t0 = time.monotonic()
        for s in (silent, slow):
            self.assertEqual(s.recv(100), b"")  # closed by levee, nothing sent
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertLess(elapsed, 5.0)
        silent.close()
        slow.close()
        # The next client is served.
        r = self.curl(lv, "/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.endswith("200 1.1"), r.stdout)

    def test_a_silent_client_does_not_delay_others(self):
        lv = self.levee({"certificate": self.cert, "key": self.key, "handshake_timeout": "30s"})
        silent = [socket.create_connection(("127.0.0.1", lv.port), timeout=10) for _ in range(20)]
        t0 = time.monotonic()
        r = self.curl(lv, "/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.monotonic() - t0, 5.0)
        for s in silent:
            s.close()


@unittest.skipUnless(shutil.which("openssl") and shutil.which("curl"), "needs the openssl CLI and curl")
class MutualTls(unittest.TestCase):
    """Client certificates against a CA bundle; the identity as tenant and as a trusted source."""

    def setUp(self):
        self.pki = Pki(self)
        self.cert, self.key = self.pki.issue("www", "www.test", dns=["www.test"])
        self.billing = self.pki.issue("billing", "billing-svc", uris=["spiffe://corp/ns/prod/sa/billing"], client=True)
        self.edge = self.pki.issue("edge", "silver", uris=["spiffe://corp/ns/edge/sa/lb"], client=True)
        self.be = Backend(self)

    def levee(self, mode="required", tenant=None, trust=None):
        listener = {"tls": {"certificate": self.cert, "key": self.key,
                            "client_auth": {"mode": mode, "ca": self.pki.ca}},
                    "tenant": tenant or {"certificate_tenants": {"spiffe://corp/ns/prod/sa/billing": "gold"}}}
        if trust is not None:
            listener["trust"] = trust
        return Levee(self, [cluster("app", [self.be.address])], listener=listener,
                     extra={"tenants": {"quotas": {"default": 1.0, "gold": 1.0, "silver": 1.0}}})

    def curl(self, lv, client=None, headers=(), extra=()):
        args = ["curl", "-sS", "--cacert", self.pki.ca, "--resolve", f"www.test:{lv.port}:127.0.0.1",
                f"https://www.test:{lv.port}/headers", "-w", "\n%{http_code}", *extra]
        if client:
            args += ["--cert", client[0], "--key", client[1]]
        for h in headers:
            args += ["-H", h]
        r = run(args)
        body, _, status = r.stdout.rpartition("\n")
        return r.returncode, status, body.lower(), r.stderr

    def test_required_accepts_a_certificate_and_takes_the_tenant_from_it(self):
        lv = self.levee()
        rc, status, body, err = self.curl(lv, self.billing, ["X-Tenant-Id: silver"])
        self.assertEqual((rc, status), (0, "200"), err)
        # The header cannot override the certificate: levee replaced it with the certificate's tenant.
        self.assertIn("x-tenant-id: gold", body)
        self.assertNotIn("silver", body)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="gold"), 1)
        self.assertEqual(lv.metric("levee_tls_handshakes_total", result="full"), 1)

    def test_a_revoked_client_certificate_is_refused_with_a_crl(self):
        crl = self.pki.crl(["edge"])
        listener = {"tls": {"certificate": self.cert, "key": self.key,
                            "client_auth": {"mode": "required", "ca": self.pki.ca, "crl": crl}},
                    "tenant": {"certificate_tenants": {"spiffe://corp/ns/prod/sa/billing": "gold"}}}
        lv = Levee(self, [cluster("app", [self.be.address])], listener=listener,
                   extra={"tenants": {"quotas": {"default": 1.0, "gold": 1.0, "silver": 1.0}}})
        rc, status, body, err = self.curl(lv, self.billing)
        self.assertEqual((rc, status), (0, "200"), err)
        # TLS 1.3: the client has finished its side before levee checks its
        # certificate, so whether curl reads the alert or first fails to
        # send depends on timing; refused either way.
        rc, status, body, err = self.curl(lv, self.edge)
        self.assertNotEqual(rc, 0, err)
        # TLS 1.2: levee checks the certificate before its own Finished, so
        # the client always reads the alert, and it names the cause.
        rc, status, body, err = self.curl(lv, self.edge, extra=TLS12)
        self.assertNotEqual(rc, 0)
        self.assertIn("revoked", err)
        self.assertEqual(lv.metric("levee_admitted_total"), 1)

    def test_a_crl_loaded_later_stops_a_revoked_client_resuming(self):
        # Sessions outlive reloads and rebuilds with the listener; they are
        # bound to the client-auth settings they were verified under. A CRL
        # that now lists the client's certificate ends its resumptions: it
        # must go through a full handshake, and is refused there.
        crl = self.pki.crl([])
        listener = {"tls": {"certificate": self.cert, "key": self.key, "session_tickets": False,
                            "client_auth": {"mode": "required", "ca": self.pki.ca, "crl": crl}}}
        lv = Levee(self, [cluster("app", [self.be.address])], listener=listener)
        sess = self.pki.path("edge.sess")
        client = ["-tls1_2", "-cert", self.edge[0], "-key", self.edge[1], "-CAfile", self.pki.ca]
        rc, out = s_client(lv.port, *client, "-sess_out", sess, servername="www.test")
        self.assertIn("HTTP/1.1 200", out)
        rc, out = s_client(lv.port, *client, "-sess_in", sess, servername="www.test")
        self.assertIn("Reused, TLSv1.2", out)
        before = lv.metric("levee_runtime_rebuilds_total", result="ok")
        self.pki.crl(["edge"])  # rewrites the same file: tls_watch rebuilds
        wait_until(lambda: lv.metric("levee_runtime_rebuilds_total", result="ok") == before + 1,
                   what="the CRL loaded again")
        rc, out = s_client(lv.port, *client, "-sess_in", sess, servername="www.test")
        self.assertNotIn("Reused", out)
        self.assertNotIn("HTTP/1.1 200", out)

    def test_required_refuses_a_client_without_a_certificate(self):
        lv = self.levee()
        # The harness's port probe connected and left: one failed handshake, counted when levee
        # notices the close. Wait for it, or it may land after `before` is read (it did under ASan).
        before = wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="failed"),
                            what="the port probe's handshake counted")
        self.assertEqual(before, 1)
        rc, status, body, err = self.curl(lv)  # TLS 1.3: the alert may come after curl's send fails
        self.assertNotEqual(rc, 0, err)
        rc, status, body, err = self.curl(lv, extra=TLS12)  # TLS 1.2: read in the handshake
        self.assertNotEqual(rc, 0)
        self.assertRegex(err, "certificate required|handshake failure")
        wait_until(lambda: lv.metric("levee_tls_handshakes_total", result="failed") == before + 2,
                   what="the failed handshakes counted")
        self.assertEqual(lv.metric("levee_admitted_total"), 0)

    def test_a_certificate_from_another_ca_is_refused(self):
        other = Pki(self)
        stranger = other.issue("billing", "billing-svc", uris=["spiffe://corp/ns/prod/sa/billing"], client=True)
        for mode in ("required", "optional"):
            lv = self.levee(mode)
            rc, status, body, err = self.curl(lv, stranger)
            self.assertNotEqual(rc, 0, mode)
            self.assertEqual(lv.metric("levee_admitted_total"), 0, mode)

    def test_optional_serves_clients_without_a_certificate_as_the_default_tenant(self):
        lv = self.levee("optional")
        rc, status, body, err = self.curl(lv, None, ["X-Tenant-Id: gold"])
        self.assertEqual((rc, status), (0, "200"), err)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="default"), 1)
        self.assertIn("x-tenant-id: default", body)  # not believed from a stranger, replaced
        rc, status, body, err = self.curl(lv, self.billing)
        self.assertEqual((rc, status), (0, "200"), err)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="gold"), 1)

    def test_tenant_named_by_a_certificate_field(self):
        lv = self.levee(tenant={"from_certificate": "cn"})
        rc, status, body, err = self.curl(lv, self.edge)  # CN=silver
        self.assertEqual((rc, status), (0, "200"), err)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="silver"), 1)

    def test_identities_as_trusted_sources(self):
        lv = self.levee(trust={"networks": [], "identities": ["spiffe://corp/ns/edge/*"]})
        rc, status, body, err = self.curl(lv, self.edge, ["X-Criticality: CRITICAL_PLUS"])
        self.assertEqual((rc, status), (0, "200"), err)
        self.assertIn("x-criticality: critical_plus", body)
        rc, status, body, err = self.curl(lv, self.billing, ["X-Criticality: CRITICAL_PLUS"])
        self.assertEqual((rc, status), (0, "200"), err)
        self.assertIn("x-criticality: critical", body)  # the default class, not the claim
        self.assertNotIn("critical_plus", body)
        self.assertEqual(lv.metric("levee_untrusted_headers_total", header="criticality"), 1)

    def test_identities_and_certificate_tenants_need_client_auth(self):
        cfg_dir = self.pki.dir
        path = os.path.join(cfg_dir, "bad.yaml")
        with open(path, "w") as f:
            json.dump({"listeners": [{"port": free_port(), "tls": {"certificate": self.cert, "key": self.key},
                                      "trust": {"identities": ["x"]},
                                      "tenant": {"certificate_tenants": {"x": "gold"}},
                                      "routes": [{"cluster": "app"}]}],
                       "tenants": {"quotas": {"gold": 1.0}},
                       "clusters": [{"name": "app", "endpoints": ["127.0.0.1:1"]}]}, f)
        r = run([LEVEE, "--validate", path])
        self.assertEqual(r.returncode, 2)
        self.assertIn("listeners[0].trust.identities: needs tls.client_auth", r.stderr)
        self.assertIn("listeners[0].tenant: tenants from certificates need tls.client_auth", r.stderr)


class TlsBackend:
    """An HTTPS backend (Python's ssl): answers with the request's headers and
    remembers the SNI names and the connections it saw."""

    def __init__(self, tc, cert, key, client_ca=None):
        import http.server
        import ssl
        import threading
        seen = self.seen = {"sni": [], "connections": 0, "requests": 0, "client_cn": [], "resumed": 0}
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if client_ca:  # mTLS: only clients with a certificate from this CA
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        ctx.sni_callback = lambda sock, name, c: seen["sni"].append(name)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                seen["connections"] += 1
                seen["resumed"] += 1 if self.request.session_reused else 0
                super().setup()

            def do_GET(self):
                seen["requests"] += 1
                peer = self.connection.getpeercert() or {}
                seen["client_cn"] += [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
                body = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        t = threading.Thread(target=self.server.serve_forever, daemon=True)
        t.start()
        tc.addCleanup(self.server.server_close)
        tc.addCleanup(self.server.shutdown)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl CLI")
class UpstreamTls(unittest.TestCase):
    """TLS from levee to a cluster: verified against a CA bundle, with SNI."""

    def setUp(self):
        self.pki = Pki(self)
        cert, key = self.pki.issue("backend", "backend.test", dns=["backend.test"])
        self.be = TlsBackend(self, cert, key)

    def levee(self, tls):
        return Levee(self, [cluster("app", [self.be.address], tls=tls)])

    def test_requests_go_over_verified_tls_with_sni_and_pooled_connections(self):
        lv = self.levee({"ca": self.pki.ca, "server_name": "backend.test"})
        c = lv.conn()
        for _ in range(3):
            c.request("GET", "/headers", headers={"Host": "front.test"})
            r = c.getresponse()
            body = r.read().decode().lower()
            self.assertEqual(r.status, 200, body)
            self.assertIn("host: front.test", body)
        c.close()
        self.assertEqual(self.be.seen["requests"], 3)
        self.assertEqual(self.be.seen["sni"], ["backend.test"])
        self.assertEqual(self.be.seen["connections"], 1)  # one pooled TLS connection served all three
        self.assertEqual(lv.metric("levee_upstream_connections_total", cluster="app"), 1)

    def test_a_server_the_bundle_does_not_vouch_for_is_not_used(self):
        other = Pki(self)
        for tls in ({"ca": other.ca, "server_name": "backend.test"},   # another CA
                    {"ca": self.pki.ca, "server_name": "wrong.test"}):  # the certificate does not name it
            lv = self.levee(tls)
            status, _, body = lv.request("GET", "/headers")
            self.assertGreaterEqual(status, 500, body)
            self.assertEqual(self.be.seen["requests"], 0, tls)
            self.assertGreaterEqual(lv.metric("levee_upstream_errors_total", kind="connect"), 1)

    def test_verify_off_encrypts_without_checking(self):
        lv = self.levee({"verify": False})
        status, _, body = lv.request("GET", "/headers")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.be.seen["sni"], [None])  # an IP endpoint and no server_name: no SNI

    def test_a_missing_ca_bundle_is_a_config_error(self):
        missing = self.pki.path("nope-ca.pem")
        path = self.pki.path("up.yaml")
        with open(path, "w") as f:
            json.dump({"listeners": [{"port": free_port(), "address": "127.0.0.1", "routes": [{"cluster": "app"}]}],
                       "clusters": [{"name": "app", "endpoints": [self.be.address], "tls": {"ca": missing}}]}, f)
        r = run([LEVEE, "--validate", path])
        self.assertEqual(r.returncode, 2)
        self.assertIn("clusters[0].tls.ca", r.stderr)
        self.assertIn(missing, r.stderr)

    def test_a_client_certificate_for_backends_that_require_one(self):
        cert, key = self.pki.issue("backend2", "backend.test", dns=["backend.test"])
        strict = TlsBackend(self, cert, key, client_ca=self.pki.ca)
        mine = self.pki.issue("levee-client", "levee-edge", client=True)
        with_cert = Levee(self, [cluster("app", [strict.address], tls={"ca": self.pki.ca, "server_name": "backend.test",
                                                                       "certificate": mine[0], "key": mine[1]})])
        status, _, body = with_cert.request("GET", "/headers")
        self.assertEqual(status, 200, body)
        self.assertEqual(strict.seen["client_cn"], ["levee-edge"])
        without = Levee(self, [cluster("app", [strict.address], tls={"ca": self.pki.ca, "server_name": "backend.test"})])
        status, _, body = without.request("GET", "/headers")
        self.assertGreaterEqual(status, 500, body)
        self.assertEqual(strict.seen["requests"], 1)

    def test_new_connections_resume_the_backends_session(self):
        # No pooling: every request opens a connection, and each after the
        # first resumes the session the backend gave (no full handshake).
        lv = Levee(self, [cluster("app", [self.be.address], max_idle=0,
                                  tls={"ca": self.pki.ca, "server_name": "backend.test"})])
        for _ in range(4):
            status, _, _ = lv.request("GET", "/headers")
            self.assertEqual(status, 200)
        self.assertEqual(self.be.seen["connections"], 4)
        self.assertGreaterEqual(self.be.seen["resumed"], 3)

    def test_health_checks_go_over_the_clusters_tls(self):
        # Probes use the cluster's TLS (its CA, server name): the endpoint is
        # healthy, and the probes reached the backend over TLS. A cluster
        # whose CA does not sign the backend's certificate fails its probes
        # and is not ready.
        lv = Levee(self, [cluster("app", [self.be.address], tls={"ca": self.pki.ca, "server_name": "backend.test"},
                                  health_check={"path": "/healthz", "interval": "100ms"})])
        wait_until(lambda: lv.metric("levee_health_checks_total", cluster="app", result="ok") >= 2,
                   what="two health checks passed")
        self.assertEqual(lv.metric("levee_health_checks_total", cluster="app", result="failed"), 0)
        self.assertGreaterEqual(self.be.seen["requests"], 2)
        self.assertIn("backend.test", self.be.seen["sni"])
        status, _, _ = lv.request("GET", "/headers")
        self.assertEqual(status, 200)
        stranger = Pki(self)
        lv2 = Levee(self, [cluster("app", [self.be.address], tls={"ca": stranger.ca, "server_name": "backend.test"},
                                   health_check={"path": "/healthz", "interval": "100ms"})], wait_ready=False)
        wait_until(lambda: lv2.metric("levee_health_checks_total", cluster="app", result="failed") >= 1,
                   what="a failed health check")
        self.assertEqual(lv2.metric("levee_health_checks_total", cluster="app", result="ok"), 0)
        self.assertEqual(lv2.admin_get("/ready")[0], 503)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl CLI")
class TlsConfigErrors(unittest.TestCase):
    """A bad certificate set-up stops start-up with exit 2 and names the file."""

    def setUp(self):
        self.pki = Pki(self)
        self.cert, self.key = self.pki.issue("www", "www.test", dns=["www.test"])
        _, self.other_key = self.pki.issue("other", "other.test")

    def start(self, tls, validate=False):
        cfg = {"admin": {"address": "127.0.0.1", "port": free_port()},
               "listeners": [{"name": "main", "address": "127.0.0.1", "port": free_port(), "tls": tls,
                              "routes": [{"cluster": "app"}]}],
               "clusters": [{"name": "app", "endpoints": ["127.0.0.1:1"]}]}
        path = self.pki.path("levee.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        args = [LEVEE, "--validate", path] if validate else [LEVEE, "-c", path]
        return run(args)

    def assert_config_error(self, tls, *needles):
        for validate in (False, True):
            r = self.start(tls, validate)
            self.assertEqual(r.returncode, 2, (validate, r.stdout, r.stderr))
            for n in needles:
                self.assertIn(n, r.stderr, validate)
            self.assertIn("listeners[0].tls", r.stderr)

    def test_missing_certificate_file(self):
        missing = self.pki.path("nope.pem")
        self.assert_config_error({"certificate": missing, "key": self.key}, missing, "No such file")

    def test_missing_key_file(self):
        missing = self.pki.path("nope.key")
        self.assert_config_error({"certificate": self.cert, "key": missing}, missing, "No such file")

    def test_a_file_that_is_not_a_certificate(self):
        junk = self.pki.path("junk.pem")
        with open(junk, "w") as f:
            f.write("not a certificate\n")
        self.assert_config_error({"certificate": junk, "key": self.key}, junk, "is not a PEM certificate")

    def test_a_key_that_does_not_match(self):
        self.assert_config_error({"certificate": self.cert, "key": self.other_key}, self.other_key,
                                 "does not match certificate", self.cert)

    def test_a_certificate_list_names_the_entry(self):
        missing = self.pki.path("second.pem")
        r = self.start({"certificates": [{"certificate": self.cert, "key": self.key},
                                         {"certificate": missing, "key": self.key}]})
        self.assertEqual(r.returncode, 2)
        self.assertIn("listeners[0].tls.certificates[1].certificate", r.stderr)
        self.assertIn(missing, r.stderr)

    def test_schema_errors(self):
        r = self.start({"certificate": self.cert})
        self.assertEqual(r.returncode, 2)
        self.assertIn("listeners[0].tls.key", r.stderr)
        r = self.start({"certificate": self.cert, "key": self.key, "min_version": "1.1"})
        self.assertEqual(r.returncode, 2)
        self.assertIn("must be 1.2 or 1.3", r.stderr)
        r = self.start({"certificate": self.cert, "key": self.key, "alpn": ["h2"]})
        self.assertEqual(r.returncode, 2)
        self.assertIn("h2 needs http2.enabled: true", r.stderr)


if __name__ == "__main__":
    unittest.main()
