"""Measurement stage: pyperf worker processes, interleaving and the machine fingerprint."""
