"""The families a head may declare (``register(name, family=...)``), in the order the reports list them: the
report gives each a marker and a hue. Imports nothing, so the reports and the registry both read it."""

FAMILIES = ("softmax and its controls", "mixtures", "pointwise functions", "sampled objectives",
            "structured and self-normalised heads")
