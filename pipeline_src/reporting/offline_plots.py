"""`dvc plots show` without a network: DVC's page loads Vega, Vega-Lite and Vega-Embed from a CDN, so offline it is
blank. ``write_template`` writes an HTML template with the three libraries inlined, bundled by vl-convert (the Vega
project's own converter), in place of DVC's script tags, and names it in this clone's `.dvc/config.local`
(``plots.html_template``, git-ignored): a fresh clone, before `make setup`, keeps DVC's own page rather than
naming a template it does not have yet (DVC then fails on every `dvc plots show`)."""
from __future__ import annotations

import configparser
from pathlib import Path

from ..io.atomic import atomic_path
from ..io.paths import REPOSITORY

TEMPLATE = REPOSITORY / ".dvc" / "plots" / "offline.html"  # .dvc/config.local: [plots] html_template
VEGA_LITE = "5.20"  # DVC's templates write Vega-Lite v5 specs

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    <script type="text/javascript">
__BUNDLE__
    </script>
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>"""


def write_template(path: Path = TEMPLATE) -> Path:
    """The page DVC fills in (its ``{plot_divs}`` and ``{refresh_tag}``; no ``{scripts}``, so no CDN tag is added),
    with the libraries that each plot's ``vegaEmbed`` call needs defined on the page itself."""
    import vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE)  # assigns vegaEmbed, vegaLite, vega to window
    page = PAGE.replace("__BUNDLE__", bundle.replace("</script", "<\\/script"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


def name_template(template: Path = TEMPLATE) -> Path:
    """Name ``template`` in its clone's .dvc/config.local (``[plots] html_template``, relative to .dvc/), keeping
    whatever else that file sets; returns the file written."""
    dvc_dir = template.parents[1]
    local = dvc_dir / "config.local"
    cfg = configparser.ConfigParser()
    cfg.read(local)
    if not cfg.has_section("plots"):
        cfg.add_section("plots")
    cfg.set("plots", "html_template", template.relative_to(dvc_dir).as_posix())
    with atomic_path(local) as tmp, open(tmp, "w", encoding="utf-8") as f:
        cfg.write(f)
    return local
