"""Golden fixtures: PyTorch's local training of fedpq's models, read by model/golden_test.go.

Run from the repository root with Debian's python3-torch and its OpenBLAS (needs torch and numpy
only; apt-get install python3-torch libopenblas0-pthread: with the reference BLAS that Debian's
libblas3 alone gives, the float32 products round differently and --check fails on train.json.gz):

    /usr/bin/python3 model/testdata/golden/torch_golden.py --data-dir ../shared/datasets

It reads the first 256 MNIST training images and writes, next to this script:

  mnist256.json.gz  those images (uint8, row-major 28x28, base64) and their labels: the test's data.
  train.json.gz     one case per (model, optimizer[, FedProx mu]): the settings, each step's batch (indices into
                    the 256), PyTorch's loss of every step and, after steps 1, 10 and the last, a
                    summary of every tensor (float64 sum and sum of squares, and the values at fixed
                    positions, see summary), and "noise": how far the same run in float64, or in
                    float32 from initial weights moved by an ulp, gets from it (see train_case), the
                    scale of float32 rounding that the test's tolerance is tied to.
  fedavg.json.gz    one FedAvg round of cnn2 over 4 clients, each update clipped to [-0.05, 0.05] per
                    parameter: each client's batches and local model, the new global model and the
                    number of clipped entries.

No weights or masks are stored: initial weights (init_weights) and dropout masks (dropout_mask)
are splitmix64 hashes that the Go test computes bit for bit the same. The script runs every case
twice and asserts that both runs agree bit for bit; with --check it instead regenerates
everything in memory and asserts that the files on disk hold exactly that. It takes about a
minute on one core.
"""
import argparse, base64, gzip, json, math, os
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
POOL = 256      # MNIST training images the batches draw from
SAMPLE = 256    # values stored per tensor and checkpoint (all of a smaller tensor)
DROP_P = 0.5    # corbin-cnn's dropout
PERTURBED = 6   # runs from perturbed initial weights per case (see train_case)
CHAOS = 2e-3    # the largest noise a case may end with: beyond it, rounding decides the result

# (model, optimizer, lr, momentum, batch, steps, seed). Chosen so that float32 rounding differences
# stay at float32 scale over all the steps (see train_case): with larger learning rates, batches or
# other seeds, a ReLU or pooling decision on the way is a near tie that rounding can flip, and the
# runs part (e.g. corbin-cnn with SGD at batch 8 in half of its perturbed runs).
CASES = [
    ("mlp", "sgd", 0.05, 0.9, 16, 150, 1),
    ("mlp", "adam", 0.002, 0.0, 16, 150, 2),
    ("cnn2", "sgd", 0.1, 0.5, 16, 150, 3),
    ("cnn2", "adam", 0.003, 0.0, 16, 150, 4),
    ("corbin-cnn", "sgd", 0.02, 0.9, 4, 100, 5),
    ("corbin-cnn", "adam", 0.0002, 0.0, 4, 100, 6),
    ("ldpfl-cnn", "sgd", 0.01, 0.9, 4, 100, 7),
    ("ldpfl-cnn", "adam", 0.0001, 0.0, 4, 100, 8),
    ("lenet", "sgd", 0.1, 0.9, 16, 150, 9),
    ("lenet", "adam", 0.001, 0.0, 16, 150, 10),
]
# FedProx (Li et al. 2020): the proximal term (mu/2) ||w - w0||^2 added to the loss, w0 the initial
# weights, at a small mu and at one large enough to hold the weights near w0 (the loss after 150 steps
# is then 0.9 to 1.3 where it is 0.05 to 0.25 at mu 0.01). Their "prox_mu" key is absent from the
# other cases (mu 0). Settings as above where the runs stay at float32 scale; cnn2 with SGD at mu 0.5
# takes lr 0.05: at lr 0.1 its loss oscillates between 1.2 and 2.2 and rounding differences grow
# tenfold every ten steps (seeds 3, 16, 26 and 36 all part).
PROX_CASES = [
    ("mlp", "sgd", 0.05, 0.9, 16, 150, 41, 0.01),
    ("mlp", "sgd", 0.05, 0.9, 16, 150, 12, 0.5),
    ("mlp", "adam", 0.002, 0.0, 16, 150, 13, 0.01),
    ("mlp", "adam", 0.002, 0.0, 16, 150, 14, 0.5),
    ("cnn2", "sgd", 0.1, 0.5, 16, 150, 25, 0.01),
    ("cnn2", "sgd", 0.05, 0.5, 16, 150, 16, 0.5),
    ("cnn2", "adam", 0.003, 0.0, 16, 150, 17, 0.01),
    ("cnn2", "adam", 0.003, 0.0, 16, 150, 18, 0.5),
]


class MaskDropout(nn.Module):
    """Inverted dropout with the mask dropout_mask(seed, step, layer, ...); train sets seed and step."""

    def __init__(self, layer):
        super().__init__()
        self.layer, self.seed, self.step = layer, 0, 0

    def forward(self, x):
        return x * torch.from_numpy(dropout_mask(self.seed, self.step, self.layer, *x.shape)).to(x.dtype)


def build(arch):
    """fedpq's architectures as nn.Sequential: parameters() is fedpq's Model.Tensors order."""
    if arch == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                             nn.Linear(16, 10))
    if arch == "cnn2":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 6, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(96, 50), nn.ReLU(), nn.Linear(50, 10))
    if arch == "corbin-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), MaskDropout(0),
                             nn.Linear(128, 10))
    if arch == "ldpfl-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
    if arch == "lenet":  # DLG's LeNet (mit-han-lab/dlg, models/vision.py): 28 -> 14 -> 7 -> 7
        return nn.Sequential(nn.Conv2d(1, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                             nn.Conv2d(12, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                             nn.Conv2d(12, 12, 5, padding=2, stride=1), nn.Sigmoid(),
                             nn.Flatten(), nn.Linear(588, 10))
    raise ValueError(arch)


def splitmix64(x):
    """splitmix64's output function on a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform24(keys):
    """Uniforms in [0, 1) with 24 bits: the top 24 bits of splitmix64(key) / 2^24."""
    return (splitmix64(keys) >> np.uint64(40)).astype(np.float64) / 2 ** 24


def init_weights(model, seed):
    """Tensor t's value j is float32(a * (2u - 1)), u = uniform24(seed ^ t<<32 ^ j), computed in
    float64: kernels before a ReLU (or lenet's sigmoid) a = sqrt(6/fan_in) (He), the logit kernel a = sqrt(6/(fan_in +
    fan_out)) (Glorot), biases a = 1/sqrt(fan_in) (PyTorch's default, nonzero)."""
    params = list(model.parameters())
    with torch.no_grad():
        for t, p in enumerate(params):
            kernel = params[t - t % 2]  # a tensor's layer kernel: itself or the one before
            fan_out = kernel.shape[0]
            fan_in = kernel.numel() // fan_out
            if t % 2:
                a = 1 / math.sqrt(fan_in)
            elif t == len(params) - 2:
                a = math.sqrt(6 / (fan_in + fan_out))
            else:
                a = math.sqrt(6 / fan_in)
            keys = np.uint64(seed) ^ (np.uint64(t) << np.uint64(32)) ^ np.arange(p.numel(), dtype=np.uint64)
            w = (a * (2 * uniform24(keys) - 1)).astype(np.float32)
            p.copy_(torch.from_numpy(w).reshape(p.shape))


def dropout_mask(seed, step, layer, examples, units):
    """[examples, units] mask: 0 where uniform24(seed ^ step<<40 ^ layer<<36 ^ example<<20 ^ unit)
    < p, else 1/(1-p)."""
    j = np.arange(examples, dtype=np.uint64)[:, None] << np.uint64(20)
    u = np.arange(units, dtype=np.uint64)[None, :]
    keys = np.uint64(seed) ^ (np.uint64(step) << np.uint64(40)) ^ (np.uint64(layer) << np.uint64(36)) ^ j ^ u
    return np.where(uniform24(keys) < DROP_P, 0.0, 1 / (1 - DROP_P)).astype(np.float32)


def epochs_batches(rng, examples, batch, steps):
    """steps minibatches of batch examples: examples shuffled per epoch, epoch after epoch."""
    order = []
    while len(order) < steps * batch:
        order += [int(examples[i]) for i in rng.permutation(len(examples))]
    return [order[s * batch:(s + 1) * batch] for s in range(steps)]


def summary(weights):
    """Per tensor: float64 sum and sum of squares, and the values at positions ((2k+1)*n) // (2*m),
    k < m = min(n, SAMPLE): evenly spread, every value of a tensor of at most SAMPLE."""
    out = []
    for w in weights:
        v = w.detach().reshape(-1).double()
        n, m = v.numel(), min(v.numel(), SAMPLE)
        pos = [(2 * k + 1) * n // (2 * m) for k in range(m)]
        out.append({"sum": v.sum().item(), "sumsq": (v * v).sum().item(), "sample": v[pos].tolist()})
    return out


def train(arch, opt, lr, momentum, batches, X, Y, init, mask_seed, dtype=torch.float32, checkpoints=(), mu=0.0):
    """Trains from init on batches; returns the losses, the weights after the checkpoint steps and
    the final weights. With mu > 0 each step's loss gains FedProx's (mu/2) sum ||w - init||^2 (as
    Flower's and FedML's FedProx add it), and the loss recorded is the cross-entropy alone."""
    model = build(arch).to(dtype)
    with torch.no_grad():
        for p, w in zip(model.parameters(), init):
            p.copy_(w)
    if opt == "sgd":
        o = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    else:
        o = torch.optim.Adam(model.parameters(), lr=lr)
    drops = [m for m in model if isinstance(m, MaskDropout)]
    start = [w.detach().clone().to(dtype) for w in init]
    X, losses, snaps = X.to(dtype), [], {}
    for s, b in enumerate(batches):
        for d in drops:
            d.seed, d.step = mask_seed, s
        o.zero_grad()
        loss = F.cross_entropy(model(X[b]), Y[b])
        total = loss
        if mu > 0:
            total = loss + mu / 2 * sum(((p - p0) ** 2).sum() for p, p0 in zip(model.parameters(), start))
        total.backward()
        o.step()
        losses.append(loss.item())
        if s + 1 in checkpoints:
            snaps[s + 1] = [p.detach().clone() for p in model.parameters()]
    return losses, snaps, [p.detach().clone() for p in model.parameters()]


def deviation(a, b):
    """Per tensor, max |a - b| / rms(b): the largest difference in units of the tensor's typical value."""
    return [((x.double() - y.double()).abs().max() / y.double().pow(2).mean().sqrt()).item() for x, y in zip(a, b)]


def perturbed(weights, seed):
    """weights with each value moved by a relative 2^-22 (one or two float32 ulps) up or down at random."""
    rng = np.random.default_rng(seed)
    return [(w.double() * (1 + 2.0 ** -22 * torch.from_numpy(rng.choice([-1.0, 1.0], size=tuple(w.shape))))).float()
            for w in weights]


def train_case(arch, opt, lr, momentum, batch, steps, seed, X, Y, mu=0.0):
    """One fixture case. Its noise is, per checkpoint and tensor, the largest deviation from this run
    of the same run in float64 and of PERTURBED float32 runs from perturbed initial weights: how far
    rounding differences carry along this trajectory. A case whose noise ends above CHAOS met a near
    tie (a ReLU input or two pooled values within rounding) that rounding flips: it is refused."""
    init = build(arch)
    init_weights(init, seed)
    init = [p.detach().clone() for p in init.parameters()]
    batches = epochs_batches(np.random.default_rng(seed), np.arange(POOL), batch, steps)
    ckpts = sorted({1, 10, steps})
    runs = [train(arch, opt, lr, momentum, batches, X, Y, init, seed, checkpoints=ckpts, mu=mu) for _ in range(2)]
    (losses, snaps, _), (losses2, snaps2, _) = runs
    assert losses == losses2 and all(torch.equal(a, b) for c in ckpts for a, b in zip(snaps[c], snaps2[c])), \
        f"{arch} {opt}: two runs differ"
    alts = [train(arch, opt, lr, momentum, batches, X, Y, [w.double() for w in init], seed, dtype=torch.float64,
                  checkpoints=ckpts, mu=mu)]
    alts += [train(arch, opt, lr, momentum, batches, X, Y, perturbed(init, 1000 * seed + k), seed, checkpoints=ckpts,
                   mu=mu) for k in range(PERTURBED)]
    out = []
    for c in ckpts:
        noise = [max(d) for d in zip(*(deviation(snaps[c], s[c]) for _, s, _ in alts))]
        loss_noise = max(abs(a - b) for l, _, _ in alts for a, b in zip(losses[:c], l[:c]))
        out.append({"step": c, "tensors": summary(snaps[c]), "noise": noise, "loss_noise": loss_noise})
    assert max(out[-1]["noise"]) <= CHAOS, f"{arch} {opt}: rounding differences grow to {max(out[-1]['noise']):.1e}"
    case = {"model": arch, "optimizer": opt, "lr": lr, "momentum": momentum, "batch": batch, "seed": seed,
            "batches": batches, "losses": losses, "checkpoints": out}
    if mu > 0:
        case["prox_mu"] = mu
    return case


def fedavg_round(X, Y, seed, dtype, clients=4, per_client=40, batch=10, epochs=2, lr=0.1, momentum=0.5,
                 radius=0.05):
    """One round as ../shared/anchors/torch_fl.py runs it with --mechanism clip: every client trains
    the global cnn2 with SGD (momentum reset per client) on its own 40 examples, its update is clipped
    to [-radius, radius] per parameter, and the global model moves by the mean clipped update."""
    g = build("cnn2")
    init_weights(g, seed)
    start = [p.detach().clone().to(dtype) for p in g.parameters()]
    total = [torch.zeros_like(w) for w in start]
    rng = np.random.default_rng(seed)
    batches, losses, locals_, clipped = [], [], [], 0
    for k in range(clients):
        own = np.arange(k * per_client, (k + 1) * per_client)
        batches.append(epochs_batches(rng, own, batch, epochs * per_client // batch))
        l, _, local = train("cnn2", "sgd", lr, momentum, batches[-1], X, Y, start, 0, dtype=dtype)
        for s, w, w0 in zip(total, local, start):
            u = w - w0
            clipped += int((u.abs() > radius).sum())
            s += u.clamp(-radius, radius)
        losses.append(l)
        locals_.append(local)
    new = [w0 + s / clients for w0, s in zip(start, total)]
    settings = {"model": "cnn2", "seed": seed, "lr": lr, "momentum": momentum, "batch": batch, "radius": radius}
    return settings, batches, losses, locals_, new, clipped


def fedavg_case(X, Y, seed=9):
    """The FedAvg fixture: the float32 round (run twice, which must agree), with each client's and
    the new global model's deviation from the same round in float64."""
    settings, batches, losses, locals_, new, clipped = fedavg_round(X, Y, seed, torch.float32)
    again = fedavg_round(X, Y, seed, torch.float32)
    assert again[2] == losses and again[5] == clipped and all(torch.equal(a, b) for a, b in zip(again[4], new)), \
        "fedavg: two runs differ"
    _, _, _, locals64, new64, clipped64 = fedavg_round(X, Y, seed, torch.float64)
    clients = [{"batches": b, "losses": l, "local": summary(w), "noise": deviation(w, w64)}
               for b, l, w, w64 in zip(batches, losses, locals_, locals64)]
    return {**settings, "clients": clients, "global": summary(new), "noise": deviation(new, new64),
            "clipped": clipped, "clipped64": clipped64, "entries": len(clients) * sum(w.numel() for w in new)}


def idx(path, n):
    """The first n items of a gzipped IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    item = int(np.prod(dims[1:], dtype=np.int64))
    off = 4 + 4 * len(dims)
    return np.frombuffer(data[off:off + n * item], dtype=np.uint8).reshape([n] + dims[1:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--check", action="store_true", help="regenerate in memory and compare with the files")
    a = p.parse_args()
    torch.set_num_threads(1)  # a fixed summation order, and light on a shared machine
    images = idx(f"{a.data_dir}/mnist/train-images-idx3-ubyte.gz", POOL)
    labels = idx(f"{a.data_dir}/mnist/train-labels-idx1-ubyte.gz", POOL)
    X = torch.from_numpy(images.astype(np.float32) / 255).unsqueeze(1)  # float32(x/255), as fedpq
    Y = torch.from_numpy(labels.astype(np.int64))
    files = {
        "mnist256.json.gz": {"images": base64.b64encode(images.tobytes()).decode(),
                             "labels": base64.b64encode(labels.tobytes()).decode()},
        "train.json.gz": [train_case(*c, X, Y) for c in CASES] + [train_case(*c[:7], X, Y, mu=c[7]) for c in PROX_CASES],
        "fedavg.json.gz": fedavg_case(X, Y),
    }
    for c in files["train.json.gz"]:
        last = c["checkpoints"][-1]
        print(f"{c['model']:>10} {c['optimizer']:4} mu {c.get('prox_mu', 0):<4}: loss {c['losses'][0]:.4f} -> {c['losses'][-1]:.4f}, "
              f"rounding noise: weights {max(last['noise']):.1e} rms, losses {last['loss_noise']:.1e}")
    fa = files["fedavg.json.gz"]
    print(f"fedavg cnn2: {fa['clipped']} of {fa['entries']} update entries clipped ({fa['clipped64']} in float64), "
          f"float32 vs float64: new global {max(fa['noise']):.1e}")
    for name, obj in files.items():
        path = os.path.join(HERE, name)
        blob = json.dumps(obj, separators=(",", ":")).encode()
        if a.check:
            with gzip.open(path, "rb") as f:
                assert f.read() == blob, f"{path} differs from a fresh run"
            print(f"{name}: matches a fresh run")
        else:
            with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
                z.write(blob)
            print(f"wrote {name} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
