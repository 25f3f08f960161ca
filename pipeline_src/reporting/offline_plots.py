"""`dvc plots show` without a network: DVC's page loads Vega, Vega-Lite and Vega-Embed from a CDN, so offline it is
blank. ``write_template`` writes the HTML template that `.dvc/config` names (``plots.html_template``) with the
three libraries inlined, bundled by vl-convert (the Vega project's own converter), in place of DVC's script tags."""
from __future__ import annotations

from pathlib import Path

from ..io.atomic import atomic_path
from ..io.paths import REPOSITORY

TEMPLATE = REPOSITORY / ".dvc" / "plots" / "offline.html"  # .dvc/config: [plots] html_template = plots/offline.html
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
