"""A dependency graph of pages: each page derives from its parent."""


class Graph:
    """Chains of pages; reading a leaf recomputes its whole chain."""

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

    def update(self, node, value):
        """Set a root page's value."""
        self.values[node] = value

    def _compute(self, node):
        parent = self.parents[node]
        if parent is None:
            return self.values[node]
        return (self._compute(parent) * 31 + 7) % 1_000_003

    def read(self, node):
        """The value of a page, recomputed from its roots."""
        return self._compute(node)

    def read_all(self):
        """Every leaf's value."""
        return [self.read(leaf) for leaf in self.leaves]
