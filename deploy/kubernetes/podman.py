#!/usr/bin/env python3
"""Renders fedpq's Kubernetes manifests into what podman kube play runs.

    (kubectl kustomize deploy/kubernetes/base; echo ---; cat secrets.yaml) |
        deploy/kubernetes/podman.py --secrets DIR [--service NAME=IP] [--claim NAME=DIR]
            [--only server|clients] [--rescheduled] > play.yaml

podman kube play runs Pods, Deployments, PersistentVolumeClaims (as named
volumes), ConfigMaps and Secrets, but not Services or Jobs. This keeps the
former as they are and turns the rest into their nearest equivalents, so
that what runs under podman is the base itself, not a second copy of it:

- an Indexed Job becomes one Pod per completion index K, named JOB-K, with
  $(JOB_COMPLETION_INDEX) in its arguments and volume mounts' subPathExpr
  replaced by K (the substitutions Kubernetes makes) and
  JOB_COMPLETION_INDEX=K in its environment;
- a Service becomes what a pod sees of it: with --service NAME=IP, every pod
  gets NAME, NAME.NAMESPACE, NAME.NAMESPACE.svc and
  NAME.NAMESPACE.svc.cluster.local as host aliases of IP, and the pods the
  Service selects are played with --ip IP (a ClusterIP that is the pod's
  own); a Service without --service is dropped;
- a Secret volume gets optional: false, its default, written out: podman 4.3
  crashes on a Secret volume that leaves it unset (containers/podman#16636);
- container ports are dropped: podman would publish each on the host, where
  two pods' :9090 collide; pods reach each other on the podman network;
- liveness and readiness probes are dropped: podman runs probes as commands
  inside the container (curl), which a FROM scratch image does not have, and
  only under systemd timers;
- an environment variable from the downward API's resourceFieldRef (the
  base's FEDPQ_MEMORY_REQUEST_MIB) gets its value, and $(NAME) in a later
  variable's value is expanded (GOMEMLIMIT), as the kubelet does: podman
  4.3 does neither;
- ServiceAccounts, NetworkPolicies and PodDisruptionBudgets are dropped,
  with a pod's serviceAccountName and automountServiceAccountToken: podman
  has no API server whose token a pod could mount, no network policy and no
  evictions (the test checks what they say against the API's schema
  instead, through helm lint and scripts/helm-test.sh).

With --claim NAME=DIR a PersistentVolumeClaim NAME is DIR on the host: podman
4.3 mounts a claim's whole volume and ignores a mount's subPath, so each
mount of the claim becomes a hostPath volume of DIR/SUBPATH of its own (the
claim itself is dropped), as the kubelet mounts a claim's subPath (the
overlay client-data's directory per fleet index).

With --secrets DIR it writes each Secret as DIR/NAME.json instead, for
podman secret create NAME DIR/NAME.json (on a cluster, too, the Secrets
exist before the workloads that use them): podman 4.3 reads a Secret that
an environment variable refers to as a JSON map of keys to base64 values
(containers/podman#16269), but a Secret volume's as the Secret itself, and
writes its data's values as they stand, without decoding them: a volume's
Secret is written with its data decoded.

With --only server it prints only the Deployments and what they mount
(ConfigMaps, volume claims), with --only clients only the Jobs' pods: so the
server can be played with its --ip, and played again beside the clients.
With --rescheduled it leaves out the volume claims, whose volumes exist
already: podman keeps them, as a cluster keeps a rescheduled pod's claims.
"""
import base64
import json
import math
import os
import re
import sys

import yaml


# What podman kube play cannot run, and is dropped (the doc comment says why).
DROPPED = ("ServiceAccount", "NetworkPolicy", "PodDisruptionBudget")


def quantity(q):
    """The value of a Kubernetes quantity (256Mi, 1G, 500m, 2), as a float."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    if not m or m.group(2) not in units and m.group(2):
        sys.exit(f"podman.py: quantity {q!r}: not one this renderer reads")
    return float(m.group(1)) * units.get(m.group(2), 1)


def resolve_env(c):
    """Gives resourceFieldRef variables their values and expands $(NAME) in
    the values after them, as the kubelet does."""
    seen = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("resourceFieldRef")
        if ref:
            kind, res = ref["resource"].split(".", 1)
            q = c.get("resources", {}).get(kind, {}).get(res)
            if q is None:
                sys.exit(f"podman.py: {e['name']}: the container has no {ref['resource']}")
            e.pop("valueFrom")
            e["value"] = str(math.ceil(quantity(q) / quantity(ref.get("divisor", "1"))))
        if "value" in e:
            e["value"] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: seen.get(m.group(1), m.group(0)), e["value"])
            seen[e["name"]] = e["value"]


def adapt(spec):
    """Adapts a pod's spec to podman kube play: no probes, ports or service
    account, explicit optional, the environment resolved."""
    spec.pop("serviceAccountName", None)
    spec.pop("automountServiceAccountToken", None)
    for c in spec.get("containers", []):
        c.pop("ports", None)
        c.pop("livenessProbe", None)
        c.pop("readinessProbe", None)
        c.pop("startupProbe", None)
        resolve_env(c)
    for v in spec.get("volumes", []):
        if "secret" in v:
            v["secret"].setdefault("optional", False)


def job_pods(job, claims):
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        sys.exit(f"podman.py: Job {job['metadata']['name']}: only Indexed Jobs can be rendered as pods")
    tmpl = spec["template"]
    pods = []
    for k in range(spec.get("completions", 1)):
        spec_k = yaml.safe_load(yaml.safe_dump(tmpl["spec"]))
        spec_k["restartPolicy"] = "Never"
        adapt(spec_k)
        for c in spec_k["containers"]:
            c["args"] = [re.sub(r"\$\(JOB_COMPLETION_INDEX\)", str(k), a) for a in c.get("args", [])]
            c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(k)})
            for m in c.get("volumeMounts", []):
                if "subPathExpr" in m:  # the kubelet expands it from the pod's environment
                    m["subPath"] = re.sub(r"\$\(JOB_COMPLETION_INDEX\)", str(k), m.pop("subPathExpr"))
        host_claims(spec_k, claims)
        meta = {"name": f"{job['metadata']['name']}-{k}", "labels": dict(tmpl.get("metadata", {}).get("labels", {}))}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec_k})
    return pods


def host_claims(spec, claims):
    """Makes each mount of a claim in claims a hostPath volume of the claim's
    directory and the mount's subPath."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec.get("containers", []):
        for i, m in enumerate(c.get("volumeMounts", [])):
            claim = volumes[m["name"]].get("persistentVolumeClaim", {}).get("claimName")
            if claim not in claims:
                continue
            name = f"{m['name']}-{c['name']}-{i}"
            path = os.path.join(claims[claim], m.pop("subPath", ""))
            spec["volumes"].append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
            m["name"] = name
    used = {m["name"] for c in spec.get("containers", []) for m in c.get("volumeMounts", [])}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] in used]


def env_secrets(docs):
    """The names of the Secrets that workloads read as environment variables."""
    names = set()
    for d in docs:
        spec = pod_spec(d)
        for c in spec.get("containers", []) if spec else []:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    names.add(ref["name"])
    return names


def pod_spec(doc):
    kind = doc["kind"]
    if kind in ("Deployment", "Job"):
        return doc["spec"]["template"]["spec"]
    if kind == "Pod":
        return doc["spec"]
    return None


def write_secret(doc, directory, as_env):
    """Writes a Secret as podman 4.3 reads it: for environment variables, a
    JSON map of its keys to their base64 values; for volumes, the Secret with
    its data decoded (podman writes each value's text as it stands)."""
    data = doc.get("data", {})
    if not as_env:
        doc = {**doc, "data": {k: base64.b64decode(v).decode() for k, v in data.items()}}
    with open(os.path.join(directory, doc["metadata"]["name"] + ".json"), "w") as f:
        json.dump(data if as_env else doc, f)


def add_aliases(spec, services):
    """Adds each Service's names, as host aliases of its IP, to a pod."""
    for (name, ns), ip in services.items():
        names = [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
        spec.setdefault("hostAliases", []).append({"ip": ip, "hostnames": names})


def main():
    args = sys.argv[1:]
    opt = lambda flag: [args[i + 1] for i, a in enumerate(args) if a == flag]
    secrets = (opt("--secrets") or [None])[0]
    only = (opt("--only") or [None])[0]
    if only not in (None, "server", "clients"):
        sys.exit("podman.py: --only server or --only clients")
    ips = dict(s.split("=", 1) for s in opt("--service"))
    claims = dict(s.split("=", 1) for s in opt("--claim"))
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    as_env = env_secrets(docs)
    services = {}
    for d in docs:
        name = d["metadata"]["name"]
        if d["kind"] == "Service" and name in ips:
            services[(name, d["metadata"].get("namespace", "default"))] = ips[name]
    out = []
    for doc in docs:
        kind = doc["kind"]
        if kind == "Secret" and secrets:
            write_secret(doc, secrets, doc["metadata"]["name"] in as_env)
            continue
        if kind == "Service" or kind in DROPPED or kind == "PersistentVolumeClaim" and "--rescheduled" in args:
            continue
        if only == "clients" and kind != "Job" or only == "server" and kind == "Job":
            continue
        if kind == "Job":
            pods = job_pods(doc, claims)
            for p in pods:
                add_aliases(p["spec"], services)
            out.extend(pods)
            continue
        if kind == "PersistentVolumeClaim" and doc["metadata"]["name"] in claims:
            continue
        if pod_spec(doc):
            adapt(pod_spec(doc))
            host_claims(pod_spec(doc), claims)
            add_aliases(pod_spec(doc), services)
        out.append(doc)
    # What pods mount first: podman resolves a pod's Secrets and ConfigMaps
    # from the documents before it.
    first = ("ConfigMap", "Secret", "PersistentVolumeClaim")
    out.sort(key=lambda d: 0 if d["kind"] in first else 1)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
