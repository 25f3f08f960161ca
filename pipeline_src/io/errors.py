"""The project's errors and stops, in a module of their own (every other module may raise them; this one imports
nothing of the project, so no import circle runs through it). The CLI turns each into one line and exit 2."""
from __future__ import annotations


class PipelineError(ValueError):
    """Something a step refuses, said in one line that names the file or key and what to do: the CLI's exit 2.
    The kinds below say what was refused."""


class ConfigError(PipelineError):
    """A params file that does not match the schema or refers to something undefined."""


class OutputError(PipelineError):
    """An output path that would remove or overwrite something that is not the step's own output: an
    existing directory where a file goes (or the reverse), the working directory, a command's own input."""


class ArtifactError(PipelineError):
    """An artifact the pipeline reads (JSON, CSV, YAML, checkpoint) that is missing a part, truncated or
    hand-broken: the message names the file and what is wrong."""


class StaleError(PipelineError):
    """An input artifact was made by another config, or its source changed since."""


class UnreadableError(ArtifactError):
    """A torch file that cannot be loaded (truncated, corrupt, not a checkpoint)."""


class ResumeError(RuntimeError):
    """A checkpoint that cannot resume this run (another config's, or unreadable)."""


class Stopped(RuntimeError):
    """Training stopped by a signal after writing its checkpoint; rerun to resume (exit 128 + the signal)."""

    def __init__(self, signum: int, where: str, ckpt) -> None:
        super().__init__(f"stopped by signal {signum} at {where}; checkpoint saved to {ckpt}; rerun to resume")
        self.signum = signum


class Diverged(RuntimeError):
    """The run's loss became non-finite or its validation perplexity worse than uniform (exit 3)."""

    def __init__(self, info: dict) -> None:
        scaled = "".join(f", or lower {key} ({value:g} now)" for key, value in (info.get("rate_options") or {}).items())
        super().__init__(f"diverged at epoch {info['epoch']}, steps {info['steps']} (lr {info['lr']:.4g}): "
                         f"{info['reason']}; lower training.lr or set training.clip{scaled}")
        self.info = info


def not_there(path) -> str:
    """Why ``path`` cannot be read although something may be named so: "does not exist", or what a symbolic link at
    it leads to (a loop of links, or a target that is gone): ``Path.exists()`` says False to all three."""
    import os
    from pathlib import Path

    path = Path(path)
    if not path.is_symlink():
        return "does not exist"
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 on a loop
        return "is a symbolic link in a loop of links (it leads back to itself)"
    except OSError as e:
        import errno

        if e.errno == errno.ELOOP:
            return "is a symbolic link in a loop of links (it leads back to itself)"
        return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    return "does not exist"


def runnable_hints(message: str, config: str | None, no_config: frozenset | set = frozenset()) -> str:
    """``message`` with every command it suggests runnable as written, where the hint does not already say so:
    `snakemake ...` gains the ``--cores all`` it refuses to run without; and for a params file ``config`` other
    than ``params.yaml``, `python -m pipeline_src CMD ...` gains ``--config FILE`` (unless CMD is one of
    ``no_config``, which take none) and `snakemake ...` gains ``--config params=FILE``. A hint that drops the file
    would run the default config instead."""
    import re
    import shlex
    from pathlib import Path

    other = bool(config) and Path(config).resolve() != Path("params.yaml").resolve()
    quoted = shlex.quote(str(config)) if other else ""

    def cli(m: re.Match) -> str:
        command = m.group(1)
        if "--config" in command or command.split()[3:4] and command.split()[3] in no_config:
            return command
        return f"{command} --config {quoted}"

    def snakemake(m: re.Match) -> str:
        command = m.group(1)
        if "--cores" not in command and " -n" not in command and "--profile" not in command:
            command = command.replace("snakemake", "snakemake --cores all", 1)
        return command if "--config" in command or not other else f"{command} --config params={quoted}"

    if other:
        message = re.sub(r"(?<=`)(python -m pipeline_src [^`]*?)(?=`)", cli, message)
    return re.sub(r"(?<=`)(snakemake(?: [^`]*?)?)(?=`)", snakemake, message)
