"""The project's errors, in a module of their own (every other module may raise them; this one imports
nothing of the project, so no import circle runs through it). The CLI turns each into one line and exit 2."""
from __future__ import annotations


class ConfigError(ValueError):
    """A params file that does not match the schema or refers to something undefined."""


class OutputError(ConfigError):
    """An output path that would remove or overwrite something that is not the step's own output: an
    existing directory where a file goes (or the reverse), the working directory, a command's own input."""


class ArtifactError(ConfigError):
    """An artifact the pipeline reads (JSON, CSV, YAML, checkpoint) that is missing a part, truncated or
    hand-broken: the message names the file and what is wrong."""
