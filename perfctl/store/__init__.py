"""The result store (the only code that reads or writes stored results) and its lock."""
