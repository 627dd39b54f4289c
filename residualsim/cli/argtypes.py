"""argparse value types of the ``residualsim`` command: each turns one option's text into a
value, or raises argparse.ArgumentTypeError (or ParameterError) with a clear message."""

from __future__ import annotations

import argparse
import math

import numpy as np

from residualsim.errors import ParameterError

__all__ = ["count", "mapping_option", "bounds_option", "float_list", "nonnegative_float",
           "state_option", "kappa_option", "rate_hz", "seconds", "split_fractions",
           "worker_count", "seed", "belief_methods", "batch_sizes", "batch_size",
           "draw_counts", "loop_names"]


def count(minimum: int, maximum: int | None = None):
    """argparse type: an int >= minimum (and <= maximum), with a clear message otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value
    return parse


def mapping_option(text: str | None, flag: str) -> dict[str, str]:
    """``name=value,name=value`` into a dict (values kept as text)."""
    result: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ParameterError(f"{flag}: expected name=value, got {item!r}")
        if name.strip() in result:
            raise ParameterError(f"{flag}: {name.strip()} is given twice")
        result[name.strip()] = value.strip()
    return result


def bounds_option(text: str | None) -> dict[str, tuple[float, float]]:
    bounds = {}
    for name, value in mapping_option(text, "--bounds").items():
        try:
            low, high = (float(v) for v in value.split(":"))
        except ValueError:
            raise ParameterError(f"--bounds: expected {name}=LOW:HIGH, got {value!r}") from None
        bounds[name] = (low, high)
    return bounds


def float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers >= 0, got {text!r}")
    return values


def nonnegative_float(text: str) -> float:
    """argparse type: one finite number >= 0."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"expected one number, got {text!r}")
    return float_list(text)[0]


def state_option(text: str):
    try:
        values = np.array([float(v) for v in text.split(",")])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not np.isfinite(values).all():
        raise argparse.ArgumentTypeError(f"the state must be finite, got {text!r}")
    return values


def kappa_option(text: str) -> tuple[float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers like 5,5, got {text!r}")
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two numbers like 5,5, got {text!r}")
    return values


def _positive(text: str, what: str, unit: str) -> float:
    """One finite number > 0 (``what``: how the message names it, ``unit``: its unit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite {unit} > 0, got {text!r}")
    return value


def rate_hz(text: str) -> float:
    """argparse type: a sample rate, Hz, finite and > 0."""
    return _positive(text, "a rate in Hz", "rate in Hz")


def worker_count(text: str) -> int:
    """argparse type: a number of workers, 1 to :data:`residualsim.parallel.MAX_WORKERS`."""
    from residualsim.parallel import MAX_WORKERS

    return count(1, MAX_WORKERS)(text)


def seed(text: str) -> int:
    """argparse type: a random seed, an integer >= 0 (numpy's generators take no other)."""
    return count(0)(text)


def seconds(text: str) -> float:
    """argparse type: a duration, s, finite and > 0."""
    return _positive(text, "seconds", "number of seconds")


def split_fractions(text: str) -> tuple[float, float, float]:
    from residualsim.data.splits import parse_split_fractions

    try:
        return parse_split_fractions(text)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _items(text: str, what: str) -> list[str]:
    """The items of a comma-separated list: an empty item (``3,3,,``) or one given twice is
    refused (each would run nothing, or the same run again)."""
    names = [name.strip() for name in text.split(",")]
    if "" in names and any(names):
        raise argparse.ArgumentTypeError(f"{what}: an empty item in {text!r}")
    twice = sorted({name for name in names if name and names.count(name) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{what}: {', '.join(twice)} given twice in {text!r}")
    return [name for name in names if name]


def belief_methods(text: str) -> tuple[str, ...]:
    """--methods: a comma-separated list of belief steps, each once."""
    from residualsim.belief.propagation import METHODS

    names = tuple(_items(text, "methods"))
    if not names or any(name not in METHODS for name in names):
        raise argparse.ArgumentTypeError(f"methods must be a comma-separated list of "
                                         f"{', '.join(METHODS)}, got {text!r}")
    return names


def _counts_or(text: str, word: str, what: str) -> tuple:
    """A comma-separated list of integers >= 1 or ``word`` (None), each once."""
    names = _items(text, what)
    if not names or not all(n == word or (n.isdigit() and int(n) >= 1) for n in names):
        raise argparse.ArgumentTypeError(f"{what} must be integers >= 1 or {word!r}, "
                                         f"comma-separated, got {text!r}")
    values = tuple(None if name == word else int(name) for name in names)
    if len(set(values)) < len(values):  # 3 and 03
        raise argparse.ArgumentTypeError(f"{what}: a value given twice in {text!r}")
    return values


def batch_sizes(text: str) -> tuple:
    """--batch-sizes: a comma-separated list of integers >= 1 or "auto" (None)."""
    return _counts_or(text, "auto", "batch sizes")


def draw_counts(text: str) -> tuple:
    """--draws: a comma-separated list of integers >= 1 or "default" (None: the conjugate
    step's own)."""
    return _counts_or(text, "default", "draws")


def loop_names(text: str) -> tuple:
    """--loops (bench beliefs): a comma-separated list of "compiled" (the rollout loop over
    Bullet's C API) and "python", each at most once."""
    names = tuple(part.strip() for part in text.split(","))
    if not names or any(name not in ("compiled", "python") for name in names) or \
            len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"loops must be compiled and/or python, each once, "
                                         f"got {text!r}")
    return names


def batch_size(text: str) -> int | None:
    """--batch-size: an integer >= 1, or "auto" (None)."""
    sizes = batch_sizes(text)
    if len(sizes) != 1:
        raise argparse.ArgumentTypeError(f"one batch size (an integer >= 1 or 'auto'), "
                                         f"got {text!r}")
    return sizes[0]
