"""The living optimization plan: phase config, judging phases, and the document."""
