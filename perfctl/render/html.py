"""The HTML page machinery shared by every report: jinja2 environment, chart slots, plotly.js.

Autoescaping is on for every template whose name ends in ``.html`` or ``.j2``;
user text reaches a page only through it, or through :func:`perfctl.render.charts.label`
inside a figure.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from pathlib import Path
from typing import Any, Literal

from perfctl.errors import UsageError
from perfctl.files import STDOUT, write_output
from perfctl.render import charts

PlotlyJs = Literal["inline", "cdn"]


class IdMaker:
    """Unique, readable HTML ids (``chart-bars-ipc``, ``chart-bars-ipc-2``...)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def make(self, prefix: str, name: str) -> str:
        """A fresh id from a prefix and any user text."""
        base = f"{prefix}-{slug(name)}"
        candidate, n = base, 1
        while candidate in self.seen:
            n += 1
            candidate = f"{base}-{n}"
        self.seen.add(candidate)
        return candidate


def slug(text: str) -> str:
    """Lower-case ASCII letters, digits and dashes only (safe in ids and classes)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def add_chart(figures: dict[str, Any], chart_id: str, title: str, fig: Any) -> dict[str, str]:
    """Register a figure under its div id; returns the view the template loops over."""
    figures[chart_id] = fig
    return {"id": chart_id, "title": title}


def sortable(value: float | None) -> str:
    """A table cell's sort key."""
    # Unknown values sort last: the JS treats an empty key as +infinity.
    return "" if value is None or not math.isfinite(value) else repr(value)


def render_page(
    name: str,
    context: dict[str, Any],
    out: Path,
    template_dir: Path | None,
    plotly_js: str,
) -> Path:
    """Render a template with the plotly context and write it atomically to ``out``."""
    import jinja2

    from perfctl import __version__

    env = _environment(template_dir)
    full = {**context, "plotly": _plotly_context(plotly_js), "perfctl_version": __version__}
    try:
        text = env.get_template(name).render(full)
    except jinja2.TemplateError as exc:
        where = f"--template-dir {template_dir}" if template_dir else "the packaged templates"
        raise UsageError(
            f"cannot render {name}: {exc}",
            f"check {where}; the README (perfctl report, Templates) lists the template fields",
        ) from exc
    if out == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return out
    return write_output(out, text, "the report")  # 0644: a report is meant to be shared


def _environment(template_dir: Path | None) -> Any:
    import jinja2

    loaders: list[jinja2.BaseLoader] = []
    if template_dir is not None:
        if not Path(template_dir).is_dir():
            raise UsageError(
                f"--template-dir {template_dir} is not a directory",
                "pass a directory holding templates to override, e.g. base.html.j2",
            )
        loaders.append(jinja2.FileSystemLoader(str(template_dir)))
    loaders.append(jinja2.FunctionLoader(_packaged_template))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=_autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["wbr"] = wbr
    # |tojson escapes < > & ' after this encoder, so JSON in <script> stays inert.
    env.policies["json.dumps_function"] = _dumps
    env.policies["json.dumps_kwargs"] = {}
    return env


def wbr(text: str) -> Any:
    """Escaped text with a line-break opportunity after each ``_ . [ , = /``.

    Regime names are long identifiers (``bytes_roundtrip_512kb[size=4096]``): a
    narrow table column may wrap them only between their parts, never inside one.
    """
    from markupsafe import Markup, escape

    return Markup(re.sub(r"([_.\[,=/])", r"\1<wbr>", str(escape(text))))


def _packaged_template(name: str) -> str | None:
    from importlib.resources import files

    parts = name.split("/")
    if ".." in parts:
        return None
    res = files("perfctl.render.templates").joinpath(*parts)
    return res.read_text(encoding="utf-8") if res.is_file() else None


def _autoescape(name: str | None) -> bool:
    # CSS/JS partials are included inside <style>/<script>, where HTML escaping
    # would corrupt them; they hold no user data. Everything else escapes.
    return not (name or "").endswith((".css", ".js"))


def _dumps(obj: Any, **_: Any) -> str:
    from plotly.io.json import to_json_plotly

    return str(to_json_plotly(obj))


def _plotly_context(mode: str) -> dict[str, Any]:
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs_version

    if mode not in ("inline", "cdn"):
        raise UsageError(f"unknown plotly_js mode `{mode}`", "use 'inline' or 'cdn'")
    cdn = mode == "cdn"
    return {
        "mode": mode,
        "js": "" if cdn else Markup(_plotly_source()),
        "src": f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js" if cdn else "",
        "template": charts.template(),
    }


@functools.cache
def _plotly_source() -> str:
    from plotly.offline import get_plotlyjs

    # Defensive: the bundle must never close the <script> it is inlined in.
    return get_plotlyjs().replace("</script", "<\\/script")
