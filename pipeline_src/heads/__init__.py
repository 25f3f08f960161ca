"""Output layers. Adding one = a module here with a ``@register("name")`` class + a config entry."""
from .base import HeadContext, OutputLayer, build_head, options_schema, register, registry
from . import adaptive, differentiated, hierarchical, mixtape, mixture, pointwise, sampled, selfnorm, softmax  # noqa: F401  (each module registers its heads)

__all__ = ["HeadContext", "OutputLayer", "build_head", "options_schema", "register", "registry"]
