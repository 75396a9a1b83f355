"""MNIST's cnn2 (JoPEQ's CNN, fedpq's `cnn2`) trained in PyTorch as fedpq's external trainer.

    fedpq run --config experiments/mnist-ldpq.yaml --data-dir ../shared/datasets \
        --trainer '/usr/bin/python3 python/examples/mnist_cnn2.py'

fedpq starts this script (a pool of them: `workers`, one per core by default), sends each the
examples it needs once, then for every client of every round the global weights, the client's
example indices and the round's settings; it clips and encodes the weights that come back.
docs/trainer.md has the protocol and the measured runs. Needs Debian's python3-torch.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fedpq_trainer  # noqa: E402  (the adapter, python/fedpq_trainer.py)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# The user's part: the model and its local training.
class CNN2(fedpq_trainer.Trainer):
    """conv5x5x6, maxpool2, conv5x5x6, maxpool2, fc50, fc: fedpq's cnn2, layer for layer."""

    def model(self, input_shape, classes):
        c, h, w = input_shape
        side = lambda n: ((n - 4) // 2 - 4) // 2  # noqa: E731  (after two conv5 + maxpool2)
        return nn.Sequential(nn.Conv2d(c, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(6 * side(h) * side(w), 50), nn.ReLU(), nn.Linear(50, classes))

    def train(self, model, x, y, s):
        opt = fedpq_trainer.optimizer(model, s)  # SGD or Adam, with the run's lr, momentum, weight decay, FedProx mu
        total = 0.0
        for xb, yb in fedpq_trainer.batches(x, y, s):  # s.epochs epochs of s.batch, shuffled from s.seed
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
        return total / (s.epochs * len(x))  # the mean training loss


if __name__ == "__main__":
    fedpq_trainer.serve(CNN2())
