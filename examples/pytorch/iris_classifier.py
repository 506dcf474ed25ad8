"""The PyTorch twin of examples/iris_classifier.c: a classifier of Fisher's iris flowers
(python3-sklearn's iris.csv), a seeded train/validation split, shuffled batches, evaluation
with early stopping and the best checkpoint; reports the best validation accuracy.
Usage: /usr/bin/python3 iris_classifier.py [CSV [OUT_DIR [STEPS]]]"""
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

IRIS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"

# iris.csv: a first line of counts and class names, then 4 measurements and a class.
data = torch.tensor(
    np.loadtxt(sys.argv[1] if len(sys.argv) > 1 else IRIS_CSV, delimiter=",", skiprows=1)
)
out_dir = sys.argv[2] if len(sys.argv) > 2 else "out/iris_classifier_torch"
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
all_ = TensorDataset(data[:, :-1].float(), data[:, -1].long())
train, val = random_split(
    all_, [len(all_) - len(all_) // 5, len(all_) // 5], torch.Generator().manual_seed(1)
)
loader = DataLoader(train, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(2))
torch.manual_seed(3)
model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
val_x, val_y = val[:]


def accuracy():
    model.eval()
    with torch.no_grad():
        acc = (model(val_x).argmax(1) == val_y).float().mean().item()
    model.train()
    return acc


best, best_step, waited, step = -1.0, 0, 0, 0
os.makedirs(out_dir, exist_ok=True)
while step < steps and waited < 10:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0 or step == steps:
            acc = accuracy()
            if acc > best:
                best, best_step, waited = acc, step, 0
                torch.save(model.state_dict(), os.path.join(out_dir, "best.pt"))
            else:
                waited += 1
        if step == steps or waited == 10:
            break
stopped = " (stopped early)" if waited == 10 else ""
print(f"best validation accuracy {best:.4f} after {best_step} steps{stopped}")
