"""deploy/kubernetes: every object passes the Kubernetes API schema, every
pod meets Pod Security "restricted", and the sidecar and gateway have the
lifecycle, disruption and trust properties docs/operations.md promises."""
import os
import re
import subprocess
import tempfile
import unittest

import yaml

import k8s_schema
from harness import LEVEE, ROOT

K8S = os.path.join(ROOT, "deploy", "kubernetes")


def load(name):
    with open(os.path.join(K8S, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def levee_container(spec):
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["name"] == "levee":
            return c
    raise AssertionError("no levee container")


def pre_stop_seconds(container):
    """How long a container's preStop pauses: a sleep action or /bin/sleep N."""
    pre = container.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return pre["sleep"]["seconds"]
    cmd = pre.get("exec", {}).get("command", [])
    if cmd[:1] == ["/bin/sleep"]:
        return int(cmd[1])
    return 0


def duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", text)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def needs_current_schemas(tc):
    if not k8s_schema.supports_native_sidecars():
        tc.skipTest("this python3-kubernetes predates Kubernetes 1.28 (native sidecars): "
                    "its schemas cannot describe these manifests (Ubuntu 24.04 ships 22.6)")


class Manifests(unittest.TestCase):
    files = ("sidecar.yaml", "gateway.yaml")

    def test_every_object_passes_the_api_schema(self):
        needs_current_schemas(self)
        for name in self.files:
            for d in load(name):
                with self.subTest(file=name, kind=d["kind"], name=d["metadata"]["name"]):
                    self.assertEqual(k8s_schema.validate_object(d), [])

    def test_the_validator_rejects_what_the_api_would(self):
        needs_current_schemas(self)
        # The checker above is only worth something if it fails on errors.
        d = load("gateway.yaml")
        dep = one(d, "Deployment")
        c = dep["spec"]["template"]["spec"]["containers"][0]
        c["imagePullPolicy"] = "IfNotPresent"
        c["securityContext"]["runAsNonroot"] = True  # misspelt field
        c["ports"][0]["containerPort"] = "8080"      # wrong type
        del dep["spec"]["selector"]                   # required
        errors = "\n".join(k8s_schema.validate_object(dep))
        self.assertIn("runAsNonroot: unknown field", errors)
        self.assertIn("containerPort: expected int", errors)
        self.assertIn("`selector`, must not be `None`", errors)
        sm = one(load("sidecar.yaml"), "ServiceMonitor")
        sm["spec"]["endpoints"][0]["intervall"] = "15s"
        self.assertTrue(k8s_schema.validate_object(sm))

    def test_pod_security_restricted(self):
        # https://kubernetes.io/docs/concepts/security/pod-security-standards/ (restricted),
        # plus a read-only root filesystem.
        for name in self.files:
            spec = pod_spec(load(name))
            with self.subTest(file=name):
                for k in ("hostNetwork", "hostPID", "hostIPC"):
                    self.assertFalse(spec.get(k, False), k)
                for v in spec.get("volumes", []):
                    self.assertTrue({"configMap", "secret", "emptyDir", "projected", "downwardAPI"} & set(v), v)
                psc = spec["securityContext"]
                self.assertEqual(psc["seccompProfile"]["type"], "RuntimeDefault")
                self.assertTrue(psc["runAsNonRoot"])
                self.assertNotEqual(psc.get("runAsUser", 1), 0)
                for c in spec.get("initContainers", []) + spec["containers"]:
                    sc = c["securityContext"]
                    self.assertFalse(sc.get("privileged", False), c["name"])
                    self.assertIs(sc["allowPrivilegeEscalation"], False, c["name"])
                    self.assertIs(sc["readOnlyRootFilesystem"], True, c["name"])
                    self.assertEqual(sc["capabilities"]["drop"], ["ALL"], c["name"])
                    self.assertLessEqual(set(sc["capabilities"].get("add", [])), {"NET_BIND_SERVICE"}, c["name"])
                    self.assertNotIn("hostPort", str(c.get("ports", [])), c["name"])
                self.assertFalse(spec.get("automountServiceAccountToken", True))
        ns = one(load("gateway.yaml"), "Namespace")
        self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted")

    def test_embedded_configs_are_valid_and_match_the_pod(self):
        for name in self.files:
            docs = load(name)
            spec = pod_spec(docs)
            lv = levee_container(spec)
            mount = next(m for m in lv["volumeMounts"] if m["mountPath"] == "/etc/levee")
            vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            if "secret" in vol:
                src = one(docs, "Secret", vol["secret"]["secretName"])
                text = src["stringData"]["levee.yaml"]
            else:
                src = one(docs, "ConfigMap", vol["configMap"]["name"])
                text = src["data"]["levee.yaml"]
            with self.subTest(file=name):
                fd, path = tempfile.mkstemp(suffix=".yaml")
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                self.addCleanup(os.unlink, path)
                out = subprocess.run([LEVEE, "--validate", path], capture_output=True, text=True)
                self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                cfg = yaml.safe_load(text)
                # API keys are secrets: a config that can hold them is a Secret.
                if "api_keys" in str(cfg.get("tenants", {})):
                    self.assertIn("secret", vol, "a config with api_keys must come from a Secret")
                ports = {p["name"]: p["containerPort"] for p in lv["ports"]}
                # Probes and scrapes reach the admin listener from outside the pod.
                self.assertEqual(cfg["admin"]["address"], "0.0.0.0")
                self.assertEqual(ports["admin"], cfg["admin"]["port"])
                self.assertEqual(sorted(v for k, v in ports.items() if k != "admin"),
                                 sorted(l["port"] for l in cfg["listeners"]))
                for probe in ("readinessProbe", "livenessProbe"):
                    self.assertEqual(lv[probe]["httpGet"]["port"], "admin")
                self.assertEqual(lv["readinessProbe"]["httpGet"]["path"], "/ready")
                # Workers come from the container's CPU limit (Downward API).
                env = {e["name"]: e for e in lv.get("env", [])}
                ref = env["LEVEE_WORKERS"]["valueFrom"]["resourceFieldRef"]
                self.assertEqual((ref["containerName"], ref["resource"]), ("levee", "limits.cpu"))
                self.assertIn("$(LEVEE_WORKERS)", lv["args"])
                self.assertIn("cpu", lv["resources"]["limits"])
                # The grace period covers every preStop pause plus the drain.
                pauses = sum(pre_stop_seconds(c) for c in spec.get("initContainers", []) + spec["containers"])
                self.assertGreater(spec["terminationGracePeriodSeconds"], pauses + duration_s(cfg["drain_timeout"]))

    def test_no_secret_material_in_config_maps(self):
        for name in self.files:
            for d in load(name):
                if d["kind"] == "ConfigMap":
                    self.assertNotIn("api_keys", d["data"]["levee.yaml"], name)
                    self.assertNotRegex(d["data"]["levee.yaml"], r"BEGIN (RSA |EC )?PRIVATE KEY")

    def test_sidecar_is_native_and_the_app_waits_for_it(self):
        spec = pod_spec(load("sidecar.yaml"))
        lv = levee_container(spec)
        self.assertIn(lv, spec["initContainers"], "levee must be an init container")
        self.assertEqual(lv["restartPolicy"], "Always")
        self.assertIn("startupProbe", lv, "the app starts only once levee is up")
        self.assertIn("preStop", lv["lifecycle"])
        app = next(c for c in spec["containers"] if c["name"] == "app")
        self.assertIn("preStop", app["lifecycle"], "the app holds on while the endpoint is withdrawn")

    def test_gateway_survives_disruption_and_keeps_client_addresses(self):
        docs = load("gateway.yaml")
        dep = one(docs, "Deployment")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        pdb = one(docs, "PodDisruptionBudget")
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
        self.assertEqual(pdb["spec"]["maxUnavailable"], 1)
        aff = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        term = aff["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        self.assertEqual(term["topologyKey"], "kubernetes.io/hostname")
        self.assertLessEqual(term["labelSelector"]["matchLabels"].items(), labels.items())
        hpa = one(docs, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], dep["metadata"]["name"])
        self.assertGreaterEqual(hpa["spec"]["minReplicas"], 2 + pdb["spec"]["maxUnavailable"] - 1)
        lb = one(docs, "Service", "levee-gateway")
        self.assertEqual(lb["spec"]["externalTrafficPolicy"], "Local",
                         "trusted_networks must see client addresses, not nodes'")
        self.assertIn("preStop", levee_container(dep["spec"]["template"]["spec"])["lifecycle"])

    def test_service_monitors_select_a_service_port(self):
        for name in self.files:
            docs = load(name)
            sm = one(docs, "ServiceMonitor")
            want = sm["spec"]["selector"]["matchLabels"]
            services = [d for d in docs if d["kind"] == "Service"
                        and want.items() <= d["metadata"].get("labels", {}).items()]
            self.assertTrue(services, f"{name}: the ServiceMonitor selects no Service")
            port_names = {p["name"] for s in services for p in s["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                self.assertIn(ep["port"], port_names, name)
                self.assertEqual(ep["path"], "/metrics")
            for s in services:
                for p in s["spec"]["ports"]:
                    if p["name"] == sm["spec"]["endpoints"][0]["port"]:
                        self.assertEqual(p["targetPort"], "admin", name)


if __name__ == "__main__":
    unittest.main()
