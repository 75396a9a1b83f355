#!/usr/bin/env python3
"""Compares two renderings of Kubernetes objects, object by object:

    scripts/manifest-diff.py A.yaml B.yaml

Each file is a stream of YAML documents (kubectl kustomize, helm template);
an object is known by its apiVersion, kind and name, and two objects are the
same when their parsed YAML is equal (key order, quoting, comments and
formatting do not count; values, lists' order and types do). It prints every
object in one file only and every path where two objects differ, and exits 1
if there is any, 0 if none.
"""
import sys

import yaml


def objects(path):
    out = {}
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if not d:
                continue
            key = (d.get("apiVersion"), d.get("kind"), d.get("metadata", {}).get("name"))
            if key in out:
                sys.exit(f"manifest-diff: {path}: {key} twice")
            out[key] = d
    return out


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in b:
                out.append(f"{path}.{k}: only in the first: {a[k]!r}")
            elif k not in a:
                out.append(f"{path}.{k}: only in the second: {b[k]!r}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: {a!r} != {b!r}")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: manifest-diff.py A.yaml B.yaml")
    a, b = objects(sys.argv[1]), objects(sys.argv[2])
    out = []
    for key in sorted(set(a) | set(b), key=str):
        name = "/".join(str(k) for k in key[1:])
        if key not in b:
            out.append(f"{name}: only in {sys.argv[1]}")
        elif key not in a:
            out.append(f"{name}: only in {sys.argv[2]}")
        else:
            diff(a[key], b[key], name, out)
    print("\n".join(out) if out else f"{len(a)} objects, the same")
    sys.exit(1 if out else 0)


if __name__ == "__main__":
    main()
