"""Profiling stage: py-spy recording, stacks, hot spots and before/after diffs."""
