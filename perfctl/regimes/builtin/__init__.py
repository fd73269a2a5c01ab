"""The built-in regime suite (ships inside the package as perfctl.regimes.builtin)."""
