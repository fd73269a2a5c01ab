"""Regimes: the authoring API, discovery, loading, requirements and the built-in suite."""
