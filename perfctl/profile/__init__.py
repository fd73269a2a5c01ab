"""Profiling stage: py-spy recording, stacks, hot spots and before/after diffs."""

# Seconds a regime loops under py-spy unless told (--duration, --profile-duration).
PROFILE_SECONDS = 5.0
