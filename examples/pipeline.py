"""A small PyTorch pipeline with three memoized steps: load_data -> train -> evaluate.

Run it twice: the second run, a new process, gets the dataset, the trained
model and its score from the store in milliseconds. Edit `Net.forward` and only
`train` and `evaluate` rerun (`load_data` does not depend on it); `--explain`
says why, with a diff, and `memolab why evaluate` names the new model it got.
Each evaluation records what it was made from (`memolab show ID`, the
dashboard's Pipeline tab).
"""
import sys
import time

t_start = time.perf_counter()

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import memolab  # noqa: E402
from memolab import memo  # noqa: E402

t_imported = time.perf_counter()


@memo
def load_data(n: int) -> TensorDataset:
    """Pretend this reads and decodes a big dataset."""
    time.sleep(0.5)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


class Net(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


@memo(ignore=["verbose"])
def train(data: TensorDataset, epochs: int = 3, lr: float = 1e-2, verbose: bool = False) -> Net:
    """Adam + a cosine schedule over a shuffling DataLoader; curves go to memolab's store."""
    torch.manual_seed(0)
    model = Net()
    loader = DataLoader(data, batch_size=128, shuffle=True, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    writer = memolab.SummaryWriter()
    step = 0
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            writer.add_scalar("train/loss", loss.item(), step)
            step += 1
        writer.add_scalar("train/lr", sched.get_last_lr()[0], epoch)
        if verbose:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    return model


@memo
def evaluate(model: Net, data: TensorDataset) -> float:
    """The trained model's mean squared error (its inputs: train's model, load_data's dataset)."""
    x, y = data.tensors
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), y).item()


if __name__ == "__main__":
    t0 = time.perf_counter()
    data = load_data(8_000)
    if "--explain" in sys.argv:  # before the call: will it hit, and if not, why?
        print(train.explain(data))
    model = train(data)
    took = time.perf_counter() - t0
    print(f"mse = {evaluate(model, data):.6f}   load_data + train: {took * 1000:.1f} ms   "
          f"(import torch + memolab: {(t_imported - t_start) * 1000:.0f} ms)")
