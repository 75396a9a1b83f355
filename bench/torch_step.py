"""PyTorch's CPU step time for fedpq's model zoo: ms per SGD step, same layer shapes.

fedpq's `fedpq bench` runs this (embedded in the binary) with the system python3 when
python3-torch is installed, to print PyTorch's column beside fedpq's. It is
../shared/anchors/torch_step.py with arguments. Debian's PyTorch calls whatever libblas.so.3 is
selected: install libopenblas0-pthread, or its dense layers run about 10x slower.

  python3 torch_step.py --models mlp,cnn2 --batch 64 --threads 1,2
prints one JSON object {"torch": VERSION, "blas": PATH, "ms": {arch: {threads: ms_per_step}}}.
"""
import argparse, json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

MODELS = {
    "linear": lambda c: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)),
    "mlp": lambda c: nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                                   nn.Linear(16, 10)),
    "mlp-wide": lambda c: nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                                        nn.Linear(64, 10)),
    "cnn2": lambda c: nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 6, 5), nn.ReLU(),
                                    nn.MaxPool2d(2), nn.Flatten(), nn.Linear(96, 50), nn.ReLU(), nn.Linear(50, 10)),
    "corbin-cnn": lambda c: nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(),
                                          nn.Dropout(0.5), nn.Linear(128, 10)),
    "ldpfl-cnn": lambda c: nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5),
                                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(),
                                         nn.Linear(512, 10)),
    "vgg-small": lambda c: nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2048, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)),
    "lenet": lambda c: nn.Sequential(nn.Conv2d(1, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                                     nn.Conv2d(12, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                                     nn.Conv2d(12, 12, 5, padding=2), nn.Sigmoid(), nn.Flatten(),
                                     nn.Linear(588, 10)),
}


def bench(arch, batch, steps, reps):
    torch.manual_seed(1)
    m = MODELS[arch](10)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    shape = (3, 32, 32) if arch == "vgg-small" else (1, 28, 28)
    x = torch.rand(batch * steps, *shape)
    y = torch.randint(0, 10, (batch * steps,))
    best = float("inf")
    for r in range(reps + 1):  # the first pass warms up
        t = time.perf_counter()
        for i in range(steps):
            xb, yb = x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
            opt.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            opt.step()
        dt = (time.perf_counter() - t) / steps * 1e3
        if r > 0:
            best = min(best, dt)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,mlp-wide,cnn2,corbin-cnn,ldpfl-cnn")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    a = p.parse_args()
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    out = {}
    for n in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(n)
        for arch in a.models.split(","):
            if arch not in MODELS:
                sys.exit(f"torch_step.py: unknown model {arch!r}")
            out.setdefault(arch, {})[str(n)] = round(bench(arch, a.batch, a.steps, a.reps), 4)
    print(json.dumps({"torch": torch.__version__, "blas": blas, "ms": out}))


if __name__ == "__main__":
    main()
