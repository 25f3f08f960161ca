"""A JSON-schema error of the params file as one line naming the file and the key: the key an unexpected key
sits at, the allowed keys or values, an integer written as a float, a number YAML read as a string."""
from __future__ import annotations

import jsonschema


def offending(err: jsonschema.ValidationError) -> list:
    """The key path that made ``err``: an unexpected key's own (the mapping holding it may come from another
    file of an ``extends:`` chain), else the value's."""
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        extra = [k for k in err.instance if k not in (err.schema.get("properties") or {})]
        return path + extra[:1]
    return path


def _number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numeric(types) -> bool:
    """A schema ``type`` that asks for a number: 'number', 'integer', or a list holding one."""
    return bool(set([types] if isinstance(types, str) else types or ()) & {"number", "integer"})


def _yaml_number(text: str) -> str:
    """``1e-3`` as YAML 1.1 reads a number: ``1.0e-03``."""
    mantissa, _, exponent = f"{float(text):e}".partition("e")
    return f"{float(mantissa):g}".rstrip("0") + ("" if "." in f"{float(mantissa):g}" else ".0") + "e" + exponent


def format_error(err: jsonschema.ValidationError, source: str) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "<top level>"
    msg = err.message
    if err.validator == "additionalProperties":
        allowed = sorted((err.schema.get("properties") or {}).keys())
        msg += f"; allowed keys here: {allowed}"
    elif err.validator == "required":
        pass
    elif err.validator == "enum":
        msg = f"{err.instance!r} is not allowed; allowed values: {err.validator_value}"
    elif err.validator == "type" and err.validator_value == "integer" and isinstance(err.instance, float) \
            and err.instance.is_integer():
        msg = f"{err.instance!r} is not an integer; write it as {int(err.instance)}"
    elif err.validator == "type" and _numeric(err.validator_value) and isinstance(err.instance, str) \
            and _number_text(err.instance):  # a head option's type is a list (['number', 'integer'])
        msg = (f"{err.instance!r} is a string to YAML (1.1 reads an exponent as a number only with a dot and a sign: "
               f"1.0e-3, 1.0e+9); write {_yaml_number(err.instance)}")
    elif err.validator in ("pattern", "minLength") and "description" in err.schema:
        msg += f" ({err.schema['description']})"
    elif err.validator == "const":
        msg = f"{err.instance!r} is not allowed; allowed value: {err.validator_value!r}"
    return f"{source}: key '{where}': {msg}"
