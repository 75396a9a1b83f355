"""fedpq_trainer: train fedpq's clients in PyTorch.

fedpq (`fedpq run --trainer CMD`, `fedpq client --trainer CMD`) starts CMD and speaks its trainer
protocol (docs/trainer.md) on the process's stdin and stdout: it sends the model's weights, the
examples and the round's settings; the trainer trains and sends the weights back. fedpq keeps
everything that protects the client: it clips and encodes what the trainer returns before anything
leaves, pairs, aggregates and keeps the privacy ledger.

The user's part is a subclass of Trainer with two methods, and a call to serve():

    import fedpq_trainer, torch.nn as nn, torch.nn.functional as F

    class MyTrainer(fedpq_trainer.Trainer):
        def model(self, input_shape, classes):        # input_shape: (C, H, W) or (F,)
            return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[-1], classes))
        def train(self, model, x, y, s):               # s: epochs, batch, lr, seed, ... (Settings)
            opt, total = fedpq_trainer.optimizer(model, s), 0.0
            for xb, yb in fedpq_trainer.batches(x, y, s):
                opt.zero_grad(); loss = F.cross_entropy(model(xb), yb); loss.backward(); opt.step()
                total += loss.item() * len(xb)
            return total / (s.epochs * len(x))         # the mean training loss

    fedpq_trainer.serve(MyTrainer())

Needs the standard library, numpy and torch only: Debian's python3-torch (with python3-numpy), run
with the system /usr/bin/python3. Import it by putting this directory on sys.path (the examples do).
Anything the trainer prints goes to stderr, which fedpq shows prefixed with the trainer's number:
stdout carries the protocol.
"""
import json
import math
import os
import struct
import sys
import time
import traceback


def _hint(exc_type, exc, tb):
    """Say how to get torch or numpy when the trainer cannot import them."""
    sys.__excepthook__(exc_type, exc, tb)
    if issubclass(exc_type, ImportError) and getattr(exc, "name", None) in ("torch", "numpy"):
        sys.stderr.write(f"fedpq_trainer: {sys.executable} cannot import {exc.name}: install Debian's python3-torch "
                         "(apt-get install python3-torch libopenblas0-pthread) and start the trainer with "
                         "/usr/bin/python3, not a pyenv or venv python3 without it\n")


sys.excepthook = _hint

import numpy as np  # noqa: E402  (after the hint is installed)

PROTOCOL = 1
MAGIC = b"fqtr"
_DTYPES = {"float32": np.dtype("<f4"), "int32": np.dtype("<i4")}


class ProtocolError(Exception):
    """A frame that breaks the protocol; the trainer exits."""


class Connection:
    """Frames on a pair of binary streams: magic, header length (uint32), body length (uint64), the JSON
    header, and the body: the header's "tensors" then its "arrays", little-endian, back to back."""

    def __init__(self, inp, out):
        self.inp, self.out = inp, out

    def _read(self, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.inp.readinto(view[got:])
            if not k:
                if got == 0:
                    return None
                raise ProtocolError(f"the stream ended after {got} of {n} bytes")
            got += k
        return buf

    def recv(self):
        """The next message as (header, tensors, arrays), each a dict of numpy arrays by name in the
        order sent; None at the end of the input."""
        pre = self._read(16)
        if pre is None:
            return None
        if bytes(pre[:4]) != MAGIC:
            raise ProtocolError(f"a frame starting {bytes(pre)!r}")
        hn, bn = struct.unpack("<IQ", bytes(pre[4:]))
        header = json.loads(bytes(self._read(hn) or b""))
        body = self._read(bn) if bn else bytearray()
        off, parts = 0, []
        for key in ("tensors", "arrays"):
            d = {}
            for a in header.get(key) or []:
                dt = _DTYPES[a["dtype"]]
                n = math.prod(a["shape"])
                d[a["name"]] = np.frombuffer(body, dtype=dt, count=n, offset=off).reshape(a["shape"])
                off += n * dt.itemsize
            parts.append(d)
        if off != bn:
            raise ProtocolError(f"a {header.get('type')} message with {bn} body bytes for arrays of {off}")
        return header, parts[0], parts[1]

    def send(self, header, tensors=(), arrays=()):
        """Writes a message: tensors are (name, array) pairs sent as float32; arrays (name, array) pairs
        sent as float32 or int32, as their dtype is."""
        header = dict(header)
        chunks, specs = [], {"tensors": [], "arrays": []}
        for key, items, fixed in (("tensors", tensors, "float32"), ("arrays", arrays, None)):
            for name, a in items:
                a = np.asarray(a)
                dt = fixed or ("int32" if a.dtype.kind in "iub" else "float32")
                a = np.ascontiguousarray(a, dtype=_DTYPES[dt])
                specs[key].append({"name": name, "dtype": dt, "shape": list(a.shape)})
                chunks.append(memoryview(a).cast("B"))
        for key in specs:
            if specs[key]:
                header[key] = specs[key]
        hb = json.dumps(header, default=_json_default).encode()
        self.out.write(MAGIC + struct.pack("<IQ", len(hb), sum(len(c) for c in chunks)) + hb)
        for c in chunks:
            self.out.write(c)
        self.out.flush()


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON")


def number(v):
    """A float for a JSON header: finite numbers as they are, the others as "nan", "inf" or "-inf"."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def connect():
    """The protocol's connection on this process's stdin and stdout. Whatever else writes to stdout
    from now on (print, a C library) goes to stderr instead, so that it cannot break the framing."""
    if sys.stdin.isatty():
        sys.stderr.write("this is a fedpq trainer: fedpq starts it and talks to it on stdin and stdout, e.g.\n"
                         f"  fedpq run --config experiments/mnist-ldpq.yaml --trainer '{sys.executable} "
                         f"{' '.join(sys.argv)}'\n(docs/trainer.md)\n")
        sys.exit(2)
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb", buffering=1 << 16)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return Connection(sys.stdin.buffer, out)


class Settings:
    """A train request's settings: client, round, seed, epochs, batch, optimizer ("sgd" or "adam"), lr,
    momentum, weight_decay, prox_mu (FedProx's mu, 0 for none: optimizer() applies it); threads, the torch
    threads fedpq asks the trainer to use."""

    def __init__(self, h):
        self.client, self.round, self.seed = h.get("client", 0), h.get("round", 0), h.get("seed", 0)
        self.epochs, self.batch = h.get("epochs", 1), h.get("batch", 1)
        self.optimizer, self.lr = h.get("optimizer", "sgd"), h.get("lr", 0.0)
        self.momentum, self.weight_decay = h.get("momentum", 0.0), h.get("weight_decay", 0.0)
        self.prox_mu = h.get("prox_mu", 0.0)
        self.threads = h.get("threads", 0)

    def __repr__(self):
        return "Settings(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


class Trainer:
    """The user's part: model() and train(); evaluate() has a default (accuracy and cross-entropy)."""

    name = None  # shown in fedpq's logs; the class name by default

    def model(self, input_shape, classes):
        """Returns a torch.nn.Module for examples of input_shape ((C, H, W) for images, (F,) for feature
        vectors) and `classes` outputs. fedpq seeds torch's generator first (the run's seed), so the
        initial weights are the same in every process; with `model: external` they are the run's
        initial model. Every floating-point entry of its state_dict is a tensor fedpq averages."""
        raise NotImplementedError

    def train(self, model, x, y, s):
        """Trains model in place on the client's examples x (float32, [N, C, H, W] or [N, F]) and labels
        y (int64, [N]) with the Settings s, and returns the mean training loss. torch's generator is
        seeded with s.seed first: use s.seed (or torch's generator) for shuffling, so that the result
        depends on the client and round only, not on which process trains it."""
        raise NotImplementedError

    def evaluate(self, model, x, y):
        """Returns (number correct, mean loss) of model on x, y; model is in eval mode, under no_grad."""
        import torch.nn.functional as F
        correct, loss = 0, 0.0
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
        return correct, loss / len(x)


def optimizer(model, s):
    """The optimizer the run's settings ask for: SGD (with momentum, weight decay) or Adam, as fedpq's own
    engine trains. With s.prox_mu > 0 (FedProx) its step() first adds s.prox_mu * (w - w0) to each
    parameter's gradient, w0 the parameter as it is now (call it before training: the global model):
    the gradient of (mu/2) ||w - w0||^2 added to the loss, before weight decay, momentum or Adam see it,
    as fedpq's engine does. A trainer with an optimizer of its own adds that term to its loss instead."""
    import torch
    params = list(model.parameters())
    if s.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    if s.prox_mu > 0:
        start, step = [p.detach().clone() for p in params], opt.step

        def prox():
            with torch.no_grad():
                for p, p0 in zip(params, start):
                    if p.grad is not None:
                        p.grad.add_(p - p0, alpha=s.prox_mu)

        def prox_step(closure=None):
            if closure is None:
                prox()
                return step()

            def with_prox():  # the step computes the gradient itself: the term comes after
                loss = closure()
                prox()
                return loss
            return step(with_prox)

        opt.step = prox_step
    return opt


def batches(x, y, s):
    """s.epochs passes over (x, y) in minibatches of s.batch, shuffled each epoch by a generator seeded with
    s.seed; the last minibatch of an epoch may be shorter (as fedpq's engine, PyTorch's drop_last=False)."""
    import torch
    gen = torch.Generator().manual_seed(s.seed)
    for _ in range(s.epochs):
        for b in torch.randperm(len(x), generator=gen).split(s.batch):
            yield x[b], y[b]


class _Dataset:
    """The examples of one of fedpq's datasets that fedpq has sent, by their index in it."""

    def __init__(self, size, shape):
        self.image = len(shape) == 3  # fedpq sends images HWC; torch wants CHW
        self.shape = (shape[2], shape[0], shape[1]) if self.image else tuple(shape)
        self.x = np.zeros((size,) + self.shape, dtype=np.float32)  # pages untouched until written
        self.y = np.zeros(size, dtype=np.int64)

    def put(self, idx, x, y):
        if self.image:
            x = x.transpose(0, 3, 1, 2)
        self.x[idx], self.y[idx] = x, y


class _Server:
    def __init__(self, trainer, conn):
        import torch
        self.torch, self.trainer, self.conn = torch, trainer, conn
        self.net, self.names, self.data = None, [], {}

    def floats(self):
        return [(k, v.detach().cpu().contiguous().numpy()) for k, v in self.net.state_dict().items()
                if v.is_floating_point()]

    def threads(self, h):
        n = h.get("threads", 0)
        if n and n != self.torch.get_num_threads():
            self.torch.set_num_threads(n)

    def setup(self, h, tensors, arrays):
        self.threads(h)
        shape = h["input_shape"]
        image_shape = (shape[2], shape[0], shape[1]) if len(shape) == 3 else tuple(shape)
        self.torch.manual_seed(h.get("seed", 0))
        self.net = self.trainer.model(image_shape, h["classes"])
        fl = self.floats()
        self.names = [k for k, _ in fl]
        return {"type": "model"}, fl

    def put(self, h, tensors, arrays):
        ds = self.data.get(h["dataset"])
        if ds is None:
            ds = self.data[h["dataset"]] = _Dataset(h["size"], h["input_shape"])
        ds.put(arrays["indices"], arrays["x"], arrays["y"])
        return {"type": "ok"}, ()

    def load(self, h, tensors, arrays):
        torch = self.torch
        if list(tensors) != self.names:
            raise ValueError(f"fedpq sent tensors {list(tensors)}, the model has {self.names}")
        self.net.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=False)
        ds = self.data[h["dataset"]]
        idx = torch.from_numpy(arrays["indices"].astype(np.int64))
        return torch.from_numpy(ds.x).index_select(0, idx), torch.from_numpy(ds.y).index_select(0, idx)

    def train(self, h, tensors, arrays):
        self.threads(h)
        x, y = self.load(h, tensors, arrays)
        s = Settings(h)
        self.torch.manual_seed(s.seed)
        self.net.train()
        t = time.perf_counter()
        loss = self.trainer.train(self.net, x, y, s)
        secs = time.perf_counter() - t
        return {"type": "trained", "examples": len(x), "loss": number(loss), "seconds": secs}, self.floats()

    def evaluate(self, h, tensors, arrays):
        self.threads(h)
        x, y = self.load(h, tensors, arrays)
        self.net.eval()
        t = time.perf_counter()
        with self.torch.no_grad():
            correct, loss = self.trainer.evaluate(self.net, x, y)
        secs = time.perf_counter() - t
        return {"type": "evaluated", "examples": len(x), "correct": int(correct), "loss": number(loss),
                "seconds": secs}, ()


def serve(trainer, name=None):
    """Serves fedpq's requests with trainer (a Trainer) until fedpq says bye or closes stdin."""
    conn = connect()
    srv = _Server(trainer, conn)
    handlers = {"setup": srv.setup, "data": srv.put, "train": srv.train, "evaluate": srv.evaluate}
    name = name or trainer.name or type(trainer).__name__
    try:
        _loop(conn, handlers, name)
    except (BrokenPipeError, ConnectionResetError):
        pass  # fedpq is gone


def _loop(conn, handlers, name):
    conn.send({"type": "hello", "protocol": PROTOCOL, "trainer": name})
    while True:
        try:
            msg = conn.recv()
        except ProtocolError as e:
            sys.stderr.write(f"fedpq_trainer: {e}\n")
            sys.exit(3)
        if msg is None or msg[0].get("type") == "bye":
            return
        h, tensors, arrays = msg
        handler = handlers.get(h.get("type"))
        try:
            if handler is None:
                raise ValueError(f"unknown message type {h.get('type')!r} (protocol {PROTOCOL})")
            reply, out = handler(h, tensors, arrays)
        except Exception:
            tb = traceback.format_exc()
            sys.stderr.write(tb)
            conn.send({"type": "error", "message": tb[-4000:]})
            continue
        conn.send(reply, out)
