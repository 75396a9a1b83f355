"""Checks python/fedpq_trainer.py's FedProx: optimizer(model, s) with s.prox_mu > 0 trains as PyTorch does
with (mu/2) sum ||w - w0||^2 added to the loss (Flower's FedProx), for SGD with momentum and weight
decay and for Adam, with and without a closure; and the term matters (training without it, or with
its sign flipped, ends elsewhere). Run by cmd/fedpq's TestPyTorchProx with Debian's python3-torch;
prints one line per case and exits 1 on a failure."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fedpq_trainer  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

STEPS, MU, TOL = 60, 0.5, 1e-5


def net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4))


def run(header, x, y, mu_in_loss=0.0, closure=False):
    """Trains net(1) for STEPS full-batch steps with fedpq_trainer.optimizer and the header's settings;
    mu_in_loss adds (mu/2) sum ||w - w0||^2 to the loss instead."""
    model, s = net(1), fedpq_trainer.Settings(header)
    start = [p.detach().clone() for p in model.parameters()]
    opt = fedpq_trainer.optimizer(model, s)

    def loss_fn():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if mu_in_loss:
            loss = loss + mu_in_loss / 2 * sum(((p - p0) ** 2).sum() for p, p0 in zip(model.parameters(), start))
        loss.backward()
        return loss

    for _ in range(STEPS):
        if closure:
            opt.step(loss_fn)
        else:
            loss_fn()
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    torch.manual_seed(0)
    x, y = torch.randn(64, 20), torch.randint(0, 4, (64,))
    failed = False
    for opt in ({"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
                {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.01}):
        for closure in (False, True):
            prox = run({**opt, "prox_mu": MU}, x, y, closure=closure)
            ref = run(opt, x, y, mu_in_loss=MU, closure=closure)
            plain = run(opt, x, y, closure=closure)
            flipped = run(opt, x, y, mu_in_loss=-MU, closure=closure)
            d = ((prox - ref).abs().max() / ref.abs().max()).item()
            far = min(((w - ref).abs().max() / ref.abs().max()).item() for w in (plain, flipped))
            ok = d <= TOL and far > 100 * TOL
            failed |= not ok
            print(f"{opt['optimizer']} closure={closure}: prox_mu {MU} vs the term in the loss: {d:.1e} of the largest "
                  f"weight (tolerance {TOL}); without it or with its sign flipped: {far:.1e}{'' if ok else '  FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
