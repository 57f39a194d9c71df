"""A training loop fed by hcomm.data's loader and by torch's DataLoader.

    python python/examples/train_loader.py [--records 16384] [--epochs 2] [--quick]

(from the repository root, with the interpreter hcomm is installed in and
numpy and torch importable: venv/bin/python after the install of
docs/python.md; HCOMM_LIBRARY=bin/capi/libhcomm.so without make install)

Generates a small synthetic dataset (no download): shards of fixed-size
records, 1024 float32 each (4 KiB, so O_DIRECT reads): 1023 features and,
last, a label (1.0 when the features' projection on a fixed direction is
positive, else 0.0). Then trains the same logistic regression on it twice,
once fed by hcomm.data.Loader (batches are tensors over pool memory, read
ahead with io_uring) and once by torch.utils.data.DataLoader(num_workers=0)
over a Dataset that reads each record with NumPy, and prints both
throughputs (samples/s) and the last loss of each: the two runs see the
same records in the same order, so they learn the same thing.
"""

import argparse
import os
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    sys.exit(f"train_loader.py needs numpy and torch in this interpreter ({sys.executable}): {e}\n"
             f"Debian: apt-get install python3-numpy python3-torch, then a venv of /usr/bin/python3 made with "
             f"--system-site-packages (docs/python.md, Install); another CPython: pip install numpy torch")

from hcomm import data

FEATURES = 1023
RECORD = (FEATURES + 1) * 4


def make_dataset(d, records, shards=4):
    rng = np.random.default_rng(0)
    w = rng.standard_normal(FEATURES).astype(np.float32)
    paths = []
    per = records // shards
    for i in range(shards):
        x = rng.standard_normal((per, FEATURES)).astype(np.float32)
        y = (x @ w > 0).astype(np.float32)
        rec = np.concatenate([x, y[:, None]], axis=1)
        p = os.path.join(d, f"train-{i}.bin")
        rec.tofile(p)
        paths.append(p)
    return paths


def train(batches, steps_hint):
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    lossf = torch.nn.BCEWithLogitsLoss()
    n, loss = 0, float("nan")
    t0 = time.perf_counter()
    for b in batches:
        x, y = b[:, :FEATURES], b[:, FEATURES:]
        opt.zero_grad()
        out = lossf(model(x), y)
        out.backward()
        opt.step()
        n += b.shape[0]
        loss = out.item()
    return n / (time.perf_counter() - t0), loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=16384)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a tiny run (tests)")
    a = ap.parse_args(argv)
    if a.quick:
        a.records, a.epochs = 1024, 1
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as d:
        paths = make_dataset(d, a.records)
        kw = dict(record_size=RECORD, dtype="float32", shape=(FEATURES + 1,), batch_size=a.batch,
                  shuffle=True, seed=1, epochs=a.epochs)
        with data.Loader(paths, format="torch", **kw) as loader:
            hc_sps, hc_loss = train(loader, len(loader))
            direct = loader.stats["opened_direct"] == loader.stats["opened"]
            # The same order for torch's DataLoader.
            order = [loader.shards[s].first + r for e in range(a.epochs) for s, r in loader.order(e)]

        files = [np.memmap(p, dtype=np.float32, mode="r") for p in paths]  # only for the sizes
        starts = np.cumsum([0] + [len(f) // (FEATURES + 1) for f in files])
        del files

        class Records(torch.utils.data.Dataset):
            def __init__(self):
                self.f = {}

            def __len__(self):
                return int(starts[-1])

            def __getitem__(self, i):
                s = int(np.searchsorted(starts, i, side="right") - 1)
                f = self.f.get(s) or self.f.setdefault(s, open(paths[s], "rb", buffering=0))
                f.seek((i - int(starts[s])) * RECORD)
                return torch.from_numpy(np.fromfile(f, dtype=np.float32, count=FEATURES + 1))

        dl = torch.utils.data.DataLoader(Records(), batch_size=a.batch, sampler=order, num_workers=0)
        dl_sps, dl_loss = train(dl, len(dl))
    print(f"{a.records} records x {a.epochs} epochs, batch {a.batch}, logistic regression on {FEATURES} features")
    print(f"  hcomm.data.Loader            {hc_sps:9.0f} samples/s   last loss {hc_loss:.4f}"
          f"   ({'O_DIRECT' if direct else 'buffered'} reads)")
    print(f"  torch DataLoader (workers 0) {dl_sps:9.0f} samples/s   last loss {dl_loss:.4f}")
    if abs(hc_loss - dl_loss) > 1e-4:
        print("the two runs learned different things: the loaders did not hand out the same batches", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
