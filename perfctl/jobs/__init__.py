"""One module per command: each job is a short sequence of stage calls."""
