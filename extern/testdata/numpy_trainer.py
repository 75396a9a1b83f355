"""The fake trainer of extern's tests (package externtest) in Python, on the adapter's framing
(python/fedpq_trainer.py: Connection, connect, number) with numpy only, so that the tests check the
adapter's side of the protocol where torch is not installed. FEDPQ_FAKE_TRAINER holds its modes."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402
import fedpq_trainer as ft  # noqa: E402

modes = dict((m.split("=") + [""])[:2] for m in os.environ.get("FEDPQ_FAKE_TRAINER", "").split(",") if m)
conn = ft.Connection(sys.stdin.buffer, sys.stdout.buffer) if "raw" in modes else ft.connect()
conn.send({"type": "hello", "protocol": 2 if "version" in modes else ft.PROTOCOL, "trainer": "numpy fake"})
data, trains, classes, feat = {}, 0, 0, 0
while True:
    msg = conn.recv()
    if msg is None or msg[0]["type"] == "bye":
        break
    h, tensors, arrays = msg
    if "print" in modes:
        print("a print to stdout, which the adapter sends to stderr")
    if h["type"] == "setup":
        classes, feat = h["classes"], int(np.prod(h["input_shape"]))
        w = (0.01 * (np.arange(classes * feat) % 7 - 3)).astype(np.float32).reshape(classes, feat)
        b = np.full(classes, h.get("seed", 0) % 5, dtype=np.float32)
        conn.send({"type": "model"}, [("w", w), ("b", b)])
    elif h["type"] == "data":
        x, y = data.setdefault(h["dataset"], (np.zeros((h["size"], feat), np.float32), np.zeros(h["size"], np.int64)))
        x[arrays["indices"]] = arrays["x"].reshape(-1, feat)
        y[arrays["indices"]] = arrays["y"]
        conn.send({"type": "ok"})
    elif h["type"] == "train":
        trains += 1
        if "hang-train" in modes:
            time.sleep(3600)
        if "crash-train" in modes or modes.get("crash-after") == str(trains):
            sys.stderr.write("Traceback (most recent call last):\nRuntimeError: the fake trainer crashed\n")
            sys.exit(3)
        if "garbage" in modes:
            conn.out.write(b"epoch 1: loss 0.25\n")
            conn.out.flush()
            time.sleep(3600)
        if "error" in modes:
            conn.send({"type": "error", "message": "Traceback (most recent call last):\nValueError: the fake trainer's own error"})
            continue
        x, y = data[h["dataset"]]
        idx = arrays["indices"]
        s = np.zeros((classes, feat)), np.zeros(classes)
        for i in idx:
            s[0][y[i]] += x[i]
            s[1][y[i]] += 1
        step = h["lr"] * h["epochs"] / len(idx) / (1 + h.get("prox_mu", 0.0))
        w = (tensors["w"].astype(np.float64) + step * s[0]).astype(np.float32)
        b = (tensors["b"].astype(np.float64) + step * s[1]).astype(np.float32)
        reply = {"type": "trained", "examples": len(idx), "loss": ft.number(h.get("seed", 0) % 1000), "seconds": 0.001}
        out = [("w", w), ("b", b)]
        if "nan" in modes:
            w.reshape(-1)[3] = np.nan
        if "missing" in modes:
            out = out[:1]
        if "extra" in modes:
            out.append(("c", np.ones(1, np.float32)))
        if "shape" in modes:
            out[0] = ("w", w.reshape(feat, classes))
        if "count" in modes:
            reply["examples"] += 1
        if "loss-nan" in modes:
            reply["loss"] = ft.number(float("nan"))
        if "update" in modes:
            reply["result"] = "update"
            out = [("w", w - tensors["w"]), ("b", b - tensors["b"])]
        conn.send(reply, out)
    elif h["type"] == "evaluate":
        x, y = data[h["dataset"]]
        idx = arrays["indices"]
        w = tensors["w"].astype(np.float64)
        w = w.reshape(feat, classes).T if "wrong-eval" in modes else w
        z = x[idx].astype(np.float64) @ w.T + tensors["b"].astype(np.float64)
        m = z.max(1)
        loss = (m + np.log(np.exp(z - m[:, None]).sum(1)) - z[np.arange(len(idx)), y[idx]]).mean()
        conn.send({"type": "evaluated", "examples": len(idx), "correct": int((z.argmax(1) == y[idx]).sum()),
                   "loss": ft.number(loss), "seconds": 0.001})
    else:
        conn.send({"type": "error", "message": "unknown message " + h["type"]})
