"""Strict validation of Kubernetes objects against the API schemas that the
official Python client's models carry (python3-kubernetes, generated from
the Kubernetes OpenAPI spec): every field must exist in the schema for its
place, have the schema's type, and every required field must be present.
(`kubectl apply` would silently drop an unknown field; this does not.)

Custom resources have no model there; ServiceMonitor is checked against a
hand-written subset of monitoring.coreos.com/v1 with python3-jsonschema."""
import re

import kubernetes.client as k8s

PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (str, int, float, bool, dict, list),  # IntOrString and free-form
    "datetime": (str,),
    "date": (str,),
}


def supports_native_sidecars():
    """Clients from Kubernetes 1.28 on know an init container's
    restartPolicy (Debian 13 has 30.1; Debian 12 and Ubuntu 24.04 ship 22.6,
    which deps.sh overlays with Debian 13's on Debian 12)."""
    return "restart_policy" in k8s.V1Container.openapi_types


def model_for(api_version, kind):
    """apps/v1 Deployment -> V1Deployment; autoscaling/v2 -> V2...."""
    version = api_version.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    cls = getattr(k8s, name, None)
    if cls is None:
        raise LookupError(f"no schema for {api_version} {kind} (model {name})")
    return cls


def validate(value, type_name, path, errors):
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            validate(v, m.group(1), f"{path}[{i}]", errors)
        return
    m = re.fullmatch(r"dict\((\w+), (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map, got {type(value).__name__}")
            return
        for k, v in value.items():
            validate(v, m.group(2), f"{path}.{k}", errors)
        return
    if type_name in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[type_name])
        if type_name in ("int", "float") and isinstance(value, bool):
            ok = False
        if not ok:
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__} {value!r}")
        return
    cls = getattr(k8s, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {type_name} object, got {type(value).__name__}")
        return
    by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    kwargs = {}
    for key, v in value.items():
        attr = by_json.get(key)
        if attr is None:
            errors.append(f"{path}.{key}: unknown field for {type_name}")
            continue
        validate(v, cls.openapi_types[attr], f"{path}.{key}", errors)
        kwargs[attr] = v
    # The model's constructor enforces required fields and enumerations.
    try:
        cls(**kwargs)
    except ValueError as e:
        errors.append(f"{path}: {type_name}: {e}")


def validate_object(doc):
    """Returns the list of schema errors of one manifest document."""
    errors = []
    if doc.get("kind") == "ServiceMonitor":
        return validate_service_monitor(doc)
    cls = model_for(doc["apiVersion"], doc["kind"])
    validate(doc, cls.__name__, doc["kind"], errors)
    return errors


# monitoring.coreos.com/v1 ServiceMonitor: the fields levee's manifests may
# use, with their types as the Prometheus Operator's CRD declares them.
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "required": ["key", "operator"], "additionalProperties": False,
            "properties": {"key": {"type": "string"}, "operator": {"type": "string"},
                           "values": {"type": "array", "items": {"type": "string"}}}}},
    },
}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["selector"],
            "additionalProperties": False,
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                    "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "jobLabel": {"type": "string"},
                "endpoints": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"},
                        "targetPort": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "path": {"type": "string"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": _DURATION,
                        "scrapeTimeout": _DURATION,
                        "honorLabels": {"type": "boolean"},
                        "bearerTokenSecret": {"type": "object", "required": ["key"], "properties": {
                            "key": {"type": "string"}, "name": {"type": "string"}, "optional": {"type": "boolean"}}},
                    }}},
            },
        },
    },
}


def validate_service_monitor(doc):
    import jsonschema
    v = jsonschema.Draft7Validator(SERVICE_MONITOR)
    errors = [f"ServiceMonitor.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in v.iter_errors(doc)]
    # metadata is a real ObjectMeta.
    validate(doc.get("metadata", {}), "V1ObjectMeta", "ServiceMonitor.metadata", errors)
    return errors
