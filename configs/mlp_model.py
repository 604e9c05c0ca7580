"""A model of your own for `source: python` specs: any callable returning a paddle.nn.Layer."""
import paddle.nn as nn


class Block(nn.Layer):
    """A residual MLP block: the unit vramtune can recompute."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class MLP(nn.Layer):
    def __init__(self, in_features: int, width: int, depth: int, classes: int):
        super().__init__()
        self.embed = nn.Linear(in_features, width)
        self.blocks = nn.LayerList([Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build(in_features: int = 256, width: int = 256, depth: int = 6, classes: int = 10) -> nn.Layer:
    return MLP(in_features, width, depth, classes)
