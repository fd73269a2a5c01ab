"""The environment of every process that runs user code.

Workers, the regime probe, the profile worker and the build steps of an
environment all import or execute code from the user's checkout. None of them
gets perfctl's own environment: they get pyperf's short list of variables
(:data:`COPY_ENV`), the ones named in ``inherit_environ``, and what perfctl
adds itself. So ``GITHUB_TOKEN`` and every other secret of the CI job stay in
the perfctl process (a regime file reading ``os.environ`` at import sees none
of them), and a stray variable never changes a measurement.

Build steps (``uv venv``, ``uv pip install``, a custom ``build`` command) also
get what installers and compilers need to reach an index or a toolchain
(:data:`BUILD_ENV`, :data:`BUILD_PREFIXES`), minus any name that looks like a
credential; anything else must be named in ``inherit_environ``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

# What pyperf copies into its workers by default.
COPY_ENV = (
    "PATH",
    "HOME",
    "TEMP",
    "TMPDIR",
    "COMSPEC",
    "SystemRoot",
    "SystemDrive",
    "PYTHONPATH",
    "PYTHON_CPU_COUNT",
    "PYTHON_GIL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
)

# Installers need a proxy and CA certificates; compilers need their flags.
BUILD_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "XDG_CACHE_HOME",
    "USER",
    "LOGNAME",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "MAKEFLAGS",
    "PKG_CONFIG_PATH",
)
BUILD_PREFIXES = ("UV_", "PIP_", "CARGO_", "RUSTUP_")

# A prefixed build variable that looks like a credential is dropped
# (UV_PUBLISH_TOKEN, PIP_PASSWORD...); name it in inherit_environ to pass it.
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|(^|_)KEY($|_)", re.IGNORECASE)


def _build_names(source: Mapping[str, str]) -> list[str]:
    prefixed = [k for k in source if k.startswith(BUILD_PREFIXES) and not _SECRET.search(k)]
    return [*BUILD_ENV, *prefixed]


def scrubbed_env(
    inherit: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
    *,
    build: bool = False,
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """pyperf's variables, ``inherit`` and (for builds) installer ones, then ``extra``."""
    src = os.environ if source is None else source
    names = [*COPY_ENV, *(_build_names(src) if build else ()), *inherit]
    env = {k: src[k] for k in names if k in src}
    if not build:
        # Nothing a worker imports from the user's checkout may leave __pycache__ there.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return {**env, **(extra or {})}
