"""A dependency graph of pages: each page derives from its parent."""


class Graph:
    """Chains of pages; a leaf is recomputed only when its root's epoch moved."""

    def __init__(self, chains, length):
        self.values = {}
        self.parents = {}
        self.leaves = []
        self.root_of = {}
        for c in range(chains):
            prev = None
            for i in range(length):
                node = (c, i)
                self.parents[node] = prev
                self.values[node] = 1 if prev is None else 0
                self.root_of[node] = (c, 0)
                prev = node
            self.leaves.append(prev)
        self.cache = {}
        self.epoch = {node: 0 for node in self.parents}

    def update(self, node, value):
        """Set a root page's value and advance its epoch."""
        self.values[node] = value
        self.epoch[node] += 1

    def _compute(self, node):
        parent = self.parents[node]
        if parent is None:
            return self.values[node]
        return (self._compute(parent) * 31 + 7) % 1_000_003

    def read(self, node):
        """The value of a page; unchanged parents are skipped by epoch."""
        epoch = self.epoch[self.root_of[node]]
        hit = self.cache.get(node)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        value = self._compute(node)
        self.cache[node] = (epoch, value)
        return value

    def read_all(self):
        """Every leaf's value."""
        return [self.read(leaf) for leaf in self.leaves]
