"""Reference subjects measured by the built-in regimes (replaceable per family)."""
