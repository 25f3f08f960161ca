"""Output layers. Adding one = a module here with a ``@register("name")`` class + a config entry."""
from .base import HeadContext, OutputLayer, build_head, options_schema, register, registry
from . import softmax  # noqa: F401  (registers "softmax")

__all__ = ["HeadContext", "OutputLayer", "build_head", "options_schema", "register", "registry"]
