#!/usr/bin/python3
"""Checks what `fedpq export` wrote, with PyTorch and ONNX.

Needs Debian's python3-torch and python3-onnx (apt-get install python3-torch python3-onnx), run with
the system /usr/bin/python3:

    /usr/bin/python3 python/checks/check_export.py [--data-dir DIR] [--tol 1e-4] PATH

PATH is a run directory after `fedpq export RUN_DIR` (or the --out directory of an export): it holds
model.safetensors and model.onnx. The checks, one line each:

1. safetensors: the file is read (by the reader below: Debian has no python3-safetensors), the spec
   in its metadata is built as a torch.nn.Sequential (layer i of the spec is module i) and the
   tensors are loaded into it with load_state_dict(strict=True): every name and shape must match.
2. onnx checker: onnx.checker.check_model(full_check=True), which also runs ONNX's shape inference;
   the inferred output must be [N, classes].
3. onnx weights: the graph's initializers equal the safetensors tensors, bit for bit.
4. onnx graph: the graph, run node by node with PyTorch's functional operators (onnx 1.12 has no
   reference evaluator; the interpreter below knows the operators fedpq writes and refuses others),
   gives the Sequential's logits, within 1e-5 of their largest magnitude.
5. accuracy: with the test set of the run's dataset (mnist or fashion-mnist, from --data-dir, else
   $FEDPQ_DATA, else ./data), the Sequential's test accuracy and mean cross-entropy equal those fedpq
   measured at export (in the metadata), within --tol. A run of its clients' own data reads its
   test set (a CSV, an NPZ, or an image folder at the run's image size; its recorded test_data
   path, else --test-data) and encodes it as the schema in the metadata says: each numeric column
   (value - shift) / scale, each categorical one one-hot over its categories, pixels / 255. Other
   datasets skip this check; without a test set, checks 4 runs on random inputs. Where PATH also holds check.safetensors (fedpq's tests write
   one for models of other inputs), its examples "x" ([N, features] in fedpq's layout: images
   row, column, channel) and labels "y" are the test set, with fedpq's accuracy and loss on them in
   its metadata.

Exit status 0 when every check passes, 1 when one fails, 2 for bad usage or missing packages.
"""
import argparse, csv, gzip, json, math, os, struct, sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import onnx
    from onnx import numpy_helper
    from PIL import Image
except ImportError as e:
    sys.stderr.write(f"check_export: {e}: install Debian's python3-torch, python3-onnx and python3-pil "
                     "(apt-get install python3-torch python3-onnx python3-pil) and run /usr/bin/python3\n")
    sys.exit(2)


def read_safetensors(path):
    """Returns ({name: float32 numpy array}, metadata) of a safetensors file of F32 tensors."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = b[8 + n:]
    tensors = {}
    for name, e in head.items():
        if e["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {e['dtype']}, expected F32")
        lo, hi = e["data_offsets"]
        a = np.frombuffer(data[lo:hi], dtype="<f4").reshape(e["shape"])
        tensors[name] = a.copy()
    return tensors, meta


def parse_spec(text):
    """The layers of a fedpq spec (the YAML fedpq writes: name, description, layers of bare kinds or
    one-line mappings), without a YAML library: Debian's python3-yaml is not needed."""
    layers, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("layers:"):
            inside = True
            continue
        if not inside or not s.startswith("- "):
            continue
        item = s[2:].strip()
        if ":" not in item:
            layers.append((item, {}))
            continue
        kind, args = item.split(":", 1)
        args = args.strip().strip("{}")
        kv = {}
        for part in filter(None, (p.strip() for p in args.split(","))):
            k, v = (x.strip() for x in part.split(":", 1))
            kv[k] = v
        layers.append((kind.strip(), kv))
    return layers


def build_sequential(layers, input_shape, classes):
    """The spec as torch.nn.Sequential: module i is layer i of the spec."""
    mods = []
    if len(input_shape) == 3:
        shape = [input_shape[2], input_shape[0], input_shape[1]]  # C, H, W
    else:
        shape = [input_shape[0]]
    for kind, a in layers:
        if kind == "conv":
            k, s, out = int(a["kernel"]), int(a.get("stride", 1)), int(a["channels"])
            p = k // 2 if a.get("padding") == "same" else 0  # fedpq writes same, or nothing for valid
            mods.append(nn.Conv2d(shape[0], out, k, stride=s, padding=p))
            shape = [out, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
        elif kind == "relu":
            mods.append(nn.ReLU())
        elif kind == "sigmoid":
            mods.append(nn.Sigmoid())
        elif kind == "maxpool":
            mods.append(nn.MaxPool2d(2))
            shape = [shape[0], shape[1] // 2, shape[2] // 2]
        elif kind == "flatten":
            mods.append(nn.Flatten())
            shape = [int(np.prod(shape))]
        elif kind == "dropout":
            mods.append(nn.Dropout(float(a.get("p", 0.5))))
        elif kind == "dense":
            units = classes if a["units"] == "classes" else int(a["units"])
            mods.append(nn.Linear(shape[0], units))
            shape = [units]
        else:
            raise ValueError(f"unknown layer kind {kind}")
    return nn.Sequential(*mods).eval()


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def run_onnx(graph, x):
    """Runs an ONNX graph of the operators fedpq writes on input x, with PyTorch's operators."""
    env = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in graph.initializer}
    env[graph.input[0].name] = x
    for node in graph.node:
        a, ins = attrs(node), [env[i] for i in node.input if i]
        op = node.op_type
        if op == "Conv":
            pads = list(a.get("pads", [0, 0, 0, 0]))
            if pads[:2] != pads[2:]:
                raise ValueError(f"{node.name}: asymmetric pads {pads}")
            y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=list(a.get("strides", [1, 1])),
                         padding=pads[:2], dilation=list(a.get("dilations", [1, 1])), groups=a.get("group", 1))
        elif op == "Relu":
            y = F.relu(ins[0])
        elif op == "Sigmoid":
            y = torch.sigmoid(ins[0])
        elif op == "MaxPool":
            pads = list(a.get("pads", [0, 0, 0, 0]))
            y = F.max_pool2d(ins[0], list(a["kernel_shape"]), stride=list(a.get("strides", a["kernel_shape"])),
                             padding=pads[:2], ceil_mode=bool(a.get("ceil_mode", 0)))
        elif op == "Flatten":
            axis = a.get("axis", 1)
            y = ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)
        elif op == "Gemm":
            A, B = ins[0], ins[1]
            if a.get("transA", 0):
                A = A.t()
            if a.get("transB", 0):
                B = B.t()
            y = a.get("alpha", 1.0) * (A @ B)
            if len(ins) > 2:
                y = y + a.get("beta", 1.0) * ins[2]
        elif op == "Dropout":
            y = ins[0]  # inference
        elif op == "Constant":
            y = torch.from_numpy(numpy_helper.to_array(a["value"]).copy())
        else:
            raise ValueError(f"{node.name}: operator {op} is not one fedpq writes")
        env[node.output[0]] = y
    return env[graph.output[0].name]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = struct.unpack(">" + "I" * ndim, b[4:4 + 4 * ndim])
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def test_set(dataset, data_dir):
    """The test images as float32 NCHW in [0, 1] (as fedpq scales them) and the labels, or None."""
    sub = {"mnist": ["mnist", "", "MNIST/raw"], "fashion-mnist": ["fashion-mnist", "", "FashionMNIST/raw"]}.get(dataset)
    if sub is None:
        return None
    for s in sub:
        d = os.path.join(data_dir, s)
        img, lbl = os.path.join(d, "t10k-images-idx3-ubyte.gz"), os.path.join(d, "t10k-labels-idx1-ubyte.gz")
        if os.path.exists(img) and os.path.exists(lbl):
            x = read_idx(img).astype(np.float32) / np.float32(255)
            return torch.from_numpy(x[:, None, :, :].copy()), torch.from_numpy(read_idx(lbl).astype(np.int64))
    return None


def own_test_set(meta, test_data):
    """A run of its clients' own data: its test set read and encoded as fedpq's schema says (a CSV's
    columns scaled and one-hot encoded, images scaled to [0, 1]), as float32 rows or NCHW, and the
    labels; or None with the reason."""
    schema = json.loads(meta["fedpq.schema"])
    path = test_data or meta.get("fedpq.test_data", "")
    if not path or not os.path.exists(path):
        return None, f"the run's test set {path!r} is not here (--test-data PATH)"
    classes = schema["classes"]
    if os.path.isdir(path):
        h, w, c = schema["shape"]
        xs, ys = [], []
        for k, name in enumerate(classes):
            d = os.path.join(path, name)
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                img = Image.open(os.path.join(d, f)).convert("L" if c == 1 else "RGB")
                if img.size != (w, h):
                    return None, f"{f} is {img.size[0]}x{img.size[1]}, the run resized to {w}x{h} (fedpq's bilinear resize is not redone here)"
                a = np.asarray(img, dtype=np.float32) / np.float32(255)
                xs.append(a.reshape(h, w, c).transpose(2, 0, 1))
                ys.append(k)
        return (torch.from_numpy(np.stack(xs)), torch.tensor(ys)), None
    if path.endswith(".npz"):
        # As fedpq reads arrays (data/npy.go): uint8 values are pixels, scaled by 1/255; (N, H, W)
        # is one channel; (N, H, W, C) is HWC unless it is already PyTorch's (N, C, H, W); labels
        # are class indices, or class names.
        z = np.load(path)
        raw = z["x"]
        x = raw.astype(np.float32) / np.float32(255) if raw.dtype == np.uint8 else raw.astype(np.float32)
        if x.ndim == 3:
            x = x[:, None, :, :]
        elif x.ndim == 4 and not (x.shape[1] in (1, 3) and x.shape[3] not in (1, 3)):
            x = x.transpose(0, 3, 1, 2)
        y = z["y"].reshape(-1)
        if y.dtype.kind in "US":
            index = {name: k for k, name in enumerate(classes)}
            y = np.array([index[str(v)] for v in y])
        return (torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y.astype(np.int64))), None
    if not (path.endswith(".csv") or path.endswith(".csv.gz")):
        return None, f"{path}: this script reads CSV, NPZ and image-folder test sets"
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    label = meta.get("fedpq.label_column") or next((n for n in ("label", "target") if n in header), None)
    li = header.index(label)
    x = np.zeros((len(rows), schema["shape"][0]), dtype=np.float32)
    y = np.zeros(len(rows), dtype=np.int64)
    for r, row in enumerate(rows):
        j = 0
        for col in schema["columns"]:
            v = row[header.index(col["name"])].strip()
            if "categories" in col:
                x[r, j + col["categories"].index(v)] = 1
                j += len(col["categories"])
            else:
                x[r, j] = np.float32((float(v) - col.get("shift", 0.0)) / col.get("scale", 1.0))
                j += 1
        y[r] = classes.index(row[li].strip())
    return (torch.from_numpy(x), torch.from_numpy(y)), None


def main():
    ap = argparse.ArgumentParser(description="Checks fedpq export's model.safetensors and model.onnx with PyTorch and ONNX.")
    ap.add_argument("path", nargs="+", help="a run directory after fedpq export, or the directory export wrote to")
    ap.add_argument("--data-dir", default=os.environ.get("FEDPQ_DATA", "data"), help="dataset directory (default $FEDPQ_DATA, else ./data)")
    ap.add_argument("--test-data", default="", help="the test set of a run of clients' own data, where its recorded path does not find it")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest difference of accuracy and of mean loss (default 1e-4)")
    args = ap.parse_args()
    for path in args.path:
        for p in (os.path.join(path, "model.safetensors"), os.path.join(path, "model.onnx")):
            if not os.path.exists(p):
                sys.stderr.write(f"check_export: no {p}: run fedpq export {path} first\n")
                return 2
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    failed = []
    for path in args.path:
        if len(args.path) > 1:
            print(f"{path}:")
        failed += check_export(path, args)
    print("all checks passed" if not failed else f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def check_export(path, args):
    """Runs the checks on one export; returns the names of those that failed."""
    st_path, onnx_path = os.path.join(path, "model.safetensors"), os.path.join(path, "model.onnx")
    failed = []

    def check(name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failed.append(name)

    tensors, meta = read_safetensors(st_path)
    input_shape = [int(d) for d in meta["fedpq.input"].split(",")]
    classes = int(meta["fedpq.classes"])
    seq = build_sequential(parse_spec(meta["fedpq.spec"]), input_shape, classes)
    try:
        seq.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
        check("safetensors", True, f"{len(tensors)} tensors loaded into {len(seq)} modules of nn.Sequential, input {input_shape} (HWC), {classes} classes")
    except RuntimeError as e:
        check("safetensors", False, str(e).replace("\n", " "))
        return failed

    m = onnx.load(onnx_path)
    try:
        onnx.checker.check_model(m, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        dims = [d.dim_param or d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
        check("onnx checker", dims[1:] == [classes], f"check_model(full_check=True) passes; opset {m.opset_import[0].version}, "
              f"{len(m.graph.node)} nodes, output {m.graph.output[0].name} inferred {dims}")
    except Exception as e:  # the checker's own exception types differ between versions
        check("onnx checker", False, str(e).replace("\n", " "))
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    same = init.keys() == tensors.keys() and all(np.array_equal(init[k].view(np.uint32), tensors[k].view(np.uint32)) for k in tensors)
    check("onnx weights", same, f"{len(init)} initializers {'equal' if same else 'differ from'} the safetensors tensors bit for bit")

    why = f"no test set of {meta.get('fedpq.dataset', '?')!r} in {args.data_dir} (mnist and fashion-mnist are read)"
    if "fedpq.schema" in meta:
        data, why = own_test_set(meta, args.test_data)
        if data is not None:
            meta = dict(meta, **{"fedpq.dataset": meta.get("fedpq.test_data", args.test_data)})
    else:
        data = test_set(meta.get("fedpq.dataset", ""), args.data_dir)
    check_path = os.path.join(path, "check.safetensors")
    if os.path.exists(check_path):
        ct, cmeta = read_safetensors(check_path)
        x = torch.from_numpy(ct["x"])
        if len(input_shape) == 3:  # HWC rows to NCHW
            h, w, c = input_shape
            x = x.reshape(-1, h, w, c).permute(0, 3, 1, 2).contiguous()
        data = (x, torch.from_numpy(ct["y"].astype(np.int64)))
        meta = dict(meta, **{"fedpq.dataset": "check.safetensors"}, **cmeta)
    if data is None:
        g = torch.Generator().manual_seed(1)
        shape = [64] + ([input_shape[2], input_shape[0], input_shape[1]] if len(input_shape) == 3 else input_shape)
        x, what = torch.rand(shape, generator=g), "64 random inputs"
    else:
        x, y = data
        what = f"the {len(y)} test examples of {meta['fedpq.dataset']}"
        if len(input_shape) == 1:
            x = x.reshape(len(x), -1)
    with torch.no_grad():
        logits = seq(x)
        graph_logits = run_onnx(m.graph, x)
    diff = (logits - graph_logits).abs().max().item()
    scale = logits.abs().max().item()
    check("onnx graph", diff <= 1e-5 * max(scale, 1), f"logits of {what} differ from nn.Sequential's by at most {diff:.3g} (largest {scale:.3g})")
    if data is None:
        print(f"skip accuracy: {why}")
    elif "fedpq.test_accuracy" not in meta:
        print("skip accuracy: the export records no test accuracy")
    else:
        acc = (logits.argmax(1) == y).double().mean().item()
        loss = F.cross_entropy(logits.double(), y).item()
        want_acc, want_loss = float(meta["fedpq.test_accuracy"]), float(meta["fedpq.test_loss"])
        check("accuracy", abs(acc - want_acc) <= args.tol and abs(loss - want_loss) <= args.tol,
              f"PyTorch {acc:.4f} (loss {loss:.6f}), fedpq {want_acc:.4f} (loss {want_loss:.6f}) on {what}; "
              f"differences {abs(acc - want_acc):.2g} and {abs(loss - want_loss):.2g}, tolerance {args.tol:g}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
