"""ParamSpace: unit coordinates, reflection, priors (with the Jacobian), errors, persistence."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from residualsim.errors import ParameterError
from residualsim.sysid.paramspace import LogUniform, Normal, ParamSpace, Uniform, parse_prior
from residualsim.sim.scenes import EngineParams


def _integrate_unit(space: ParamSpace, n: int = 200_001) -> float:
    """∫ exp(log_prior(z)) dz over [0, 1] for a one-parameter space (trapezoid rule)."""
    z = np.linspace(0.0, 1.0, n)
    density = np.exp(space.log_prior(z[:, None]))
    return float(np.trapezoid(density, z))


# --- coordinates ----------------------------------------------------------------------------
def test_linear_and_log_maps_hit_known_points():
    space = ParamSpace(["lateral_friction", "contact_stiffness"],
                       bounds={"lateral_friction": (0.1, 0.5), "contact_stiffness": (1e3, 1e7)})
    np.testing.assert_allclose(space.to_unit([0.3, 1e5]), [0.5, 0.5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(space.to_unit([0.1, 1e3]), [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(space.to_unit([0.5, 1e7]), [1.0, 1.0], atol=1e-12)
    # log scale: a quarter of the way in z is a factor 10 in stiffness
    np.testing.assert_allclose(space.from_unit([0.25, 0.25]), [0.2, 1e4], rtol=1e-12)


def test_to_unit_from_unit_round_trip():
    space = ParamSpace(["lateral_friction", "restitution", "contact_stiffness",
                        "contact_damping"],
                       bounds={"lateral_friction": (0.05, 1.5), "contact_stiffness": (2e2, 5e6)})
    rng = np.random.default_rng(0)
    z = rng.random((50, 4))
    x = space.from_unit(z)
    np.testing.assert_allclose(space.to_unit(x), z, rtol=0, atol=1e-12)
    assert np.all((x[:, 2] >= 2e2) & (x[:, 2] <= 5e6))
    np.testing.assert_allclose(space.from_unit(space.to_unit(x)), x, rtol=1e-12)


def test_reflect_folds_into_the_unit_interval():
    folded = ParamSpace.reflect(np.array([-0.1, 1.2, 2.3, 0.4, -1.3, 0.0, 1.0]))
    np.testing.assert_allclose(folded, [0.1, 0.8, 0.3, 0.4, 0.7, 0.0, 1.0], atol=1e-12)
    many = ParamSpace.reflect(np.random.default_rng(1).normal(0.5, 3.0, size=(1000, 2)))
    assert np.all((many >= 0.0) & (many <= 1.0))


# --- priors -----------------------------------------------------------------------------------
def test_log_prior_is_minus_inf_outside_the_unit_box():
    space = ParamSpace(["lateral_friction", "restitution"])
    values = space.log_prior(np.array([[0.5, 0.5], [-0.01, 0.5], [0.5, 1.01], [1.0, 0.0]]))
    assert np.isfinite(values[0]) and np.isfinite(values[3])
    assert values[1] == -np.inf and values[2] == -np.inf


def test_uniform_prior_is_constant_on_linear_parameters():
    space = ParamSpace(["lateral_friction", "restitution"])
    z = np.random.default_rng(2).random((20, 2))
    values = space.log_prior(z)
    np.testing.assert_allclose(values, values[0], rtol=0, atol=1e-12)


def test_loguniform_prior_is_constant_in_unit_coordinates_of_a_log_parameter():
    space = ParamSpace(["contact_stiffness"], bounds={"contact_stiffness": (1e3, 1e7)})
    assert isinstance(space.parameters[0].prior, LogUniform)  # the default for log scale
    values = space.log_prior(np.linspace(0, 1, 11)[:, None])
    np.testing.assert_allclose(values, values[0], atol=1e-9)


def test_uniform_prior_on_a_log_parameter_includes_the_jacobian():
    low, high = 1e3, 1e7
    space = ParamSpace(["contact_stiffness"], bounds={"contact_stiffness": (low, high)},
                       priors={"contact_stiffness": "uniform"})
    # density in z ∝ dx/dz = x log(high/low): the ratio of two points is the ratio of x
    z = np.array([[0.25], [0.75]])
    x = space.from_unit(z)[:, 0]
    values = space.log_prior(z)
    assert values[1] - values[0] == pytest.approx(math.log(x[1] / x[0]), rel=1e-12)
    # a flat (unnormalised, density 1) prior in x has total mass high - low; so must its
    # density in z
    assert _integrate_unit(space) == pytest.approx(high - low, rel=1e-6)


def test_uniform_prior_on_a_linear_parameter_has_the_right_mass():
    space = ParamSpace(["lateral_friction"], bounds={"lateral_friction": (0.2, 0.7)})
    assert _integrate_unit(space) == pytest.approx(0.5, rel=1e-9)


def test_normal_prior_parsed_and_mass_matches_a_gaussian():
    space = ParamSpace(["restitution"], priors={"restitution": "normal:0.2:0.05"})
    prior = space.parameters[0].prior
    assert prior == Normal(0.2, 0.05)
    assert prior.describe() == "normal:0.2:0.05"
    values = space.log_prior(np.array([[0.2], [0.25], [0.1]]))
    assert values[0] - values[1] == pytest.approx(0.5, rel=1e-12)   # one std
    assert values[0] - values[2] == pytest.approx(2.0, rel=1e-12)   # two std
    # unnormalised Gaussian truncated to [0, 1]: mass std sqrt(2 pi) (Phi(16) - Phi(-4))
    def phi(u):
        return 0.5 * (1.0 + math.erf(u / math.sqrt(2.0)))

    mass = 0.05 * math.sqrt(2 * math.pi) * (phi((1.0 - 0.2) / 0.05) - phi((0.0 - 0.2) / 0.05))
    assert _integrate_unit(space) == pytest.approx(mass, rel=1e-8)


def test_parse_prior_forms():
    assert parse_prior("uniform") == Uniform()
    assert parse_prior(" LogUniform ") == LogUniform()
    assert parse_prior("normal:-1:2.5") == Normal(-1.0, 2.5)


# --- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"names": ["lateral_frictoin"]}, "lateral_frictoin"),
        ({"names": ["restitution"], "bounds": {"restitution": (0.8, 0.2)}}, "restitution"),
        ({"names": ["restitution"], "bounds": {"restitution": (0.3, 0.3)}}, "restitution"),
        ({"names": ["restitution"], "bounds": {"restitution": (0.1, 1.5)}}, "restitution"),
        ({"names": ["lateral_friction"], "bounds": {"lateral_friction": (-0.5, 1.0)}},
         "lateral_friction"),
        ({"names": ["restitution"], "bounds": {"restitution": (0.1, float("nan"))}},
         "restitution"),
        ({"names": ["contact_stiffness"], "bounds": {"contact_stiffness": (0.0, 1e5)}},
         "contact_stiffness"),
        ({"names": ["contact_damping"], "priors": {"contact_damping": "loguniform"}},
         "contact_damping"),
        ({"names": ["restitution", "lateral_friction", "restitution"]}, "restitution"),
        ({"names": ["restitution"], "bounds": {"lateral_friction": (0.0, 1.0)}},
         "lateral_friction"),
        ({"names": ["restitution"], "priors": {"spinning_friction": "uniform"}},
         "spinning_friction"),
    ],
    ids=["unknown-name", "reversed-bounds", "empty-bounds", "restitution-above-1",
         "friction-below-0", "nan-bound", "log-scale-low-zero", "loguniform-low-zero",
         "duplicate", "bound-for-uncalibrated", "prior-for-uncalibrated"],
)
def test_bad_spaces_raise_parameter_error_naming_the_parameter(kwargs, needle):
    with pytest.raises(ParameterError) as info:
        ParamSpace(**kwargs)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_log_scale_lower_bound_message():
    with pytest.raises(ParameterError, match="contact_damping: a log-scale parameter needs a "
                                             "lower bound > 0"):
        ParamSpace(["contact_damping"], priors={"contact_damping": "loguniform"})


@pytest.mark.parametrize("names", [[], [""], ["  "]])
def test_empty_name_list_is_refused(names):
    with pytest.raises(ParameterError, match="at least one parameter"):
        ParamSpace(names)


@pytest.mark.parametrize("text", ["cauchy", "normal:0.2", "normal:a:b", "normal:0.2:0",
                                  "normal:0.2:-1", "uniform:0:1", ""])
def test_bad_prior_strings_are_refused(text):
    with pytest.raises(ParameterError, match="prior"):
        parse_prior(text)
    with pytest.raises(ValueError):
        ParamSpace(["restitution"], priors={"restitution": text or "normal:"})


def test_bad_prior_error_names_the_parameter():
    with pytest.raises(ParameterError) as info:
        ParamSpace(["lateral_friction", "restitution"], priors={"restitution": "cauchy"})
    assert "restitution" in str(info.value)


# --- persistence and engine parameters --------------------------------------------------------------
def test_json_round_trip_and_equality():
    base = EngineParams(lateral_friction=0.6, spinning_friction=0.01)
    space = ParamSpace(["restitution", "contact_stiffness", "contact_damping"],
                       bounds={"contact_stiffness": (1e4, 1e6), "contact_damping": (0.0, 50.0)},
                       priors={"restitution": "normal:0.2:0.05"}, base=base)
    content = space.as_json()
    again = ParamSpace.from_json(json.loads(json.dumps(content)))
    assert again == space
    assert again.names == space.names
    assert again.base == base
    assert [p.prior for p in again.parameters] == [p.prior for p in space.parameters]
    assert [(p.low, p.high, p.log_scale) for p in again.parameters] == [
        (p.low, p.high, p.log_scale) for p in space.parameters]
    z = np.random.default_rng(3).random((5, 3))
    np.testing.assert_array_equal(again.from_unit(z), space.from_unit(z))
    np.testing.assert_array_equal(again.log_prior(z), space.log_prior(z))
    # different bounds, priors or base values are different spaces
    assert ParamSpace(["restitution"]) != ParamSpace(["restitution"],
                                                     bounds={"restitution": (0.0, 0.9)})
    assert ParamSpace(["restitution"]) != ParamSpace(["restitution"],
                                                     priors={"restitution": "normal:0.5:0.1"})
    assert ParamSpace(["restitution"]) != ParamSpace(
        ["restitution"], base=EngineParams(lateral_friction=0.5))
    assert ParamSpace(["restitution"]) != "restitution"


def test_json_round_trip_keeps_a_precise_normal_prior():
    space = ParamSpace(["restitution"], priors={"restitution": "normal:0.123456789:0.0123456789"})
    again = ParamSpace.from_json(json.loads(json.dumps(space.as_json())))
    assert again.parameters[0].prior == space.parameters[0].prior
    assert again.log_prior(np.array([[0.5]]))[0] == space.log_prior(np.array([[0.5]]))[0]


def test_from_json_refuses_other_content():
    with pytest.raises(ParameterError, match="not a parameter-space description"):
        ParamSpace.from_json({"names": ["restitution"]})


def test_engine_params_fill_the_base_values():
    base = EngineParams(lateral_friction=0.7, rolling_friction=0.002)
    space = ParamSpace(["restitution", "contact_stiffness"], base=base)
    params = space.engine_params([0.35, 2e5])
    assert params == EngineParams(lateral_friction=0.7, restitution=0.35, rolling_friction=0.002,
                                  contact_stiffness=2e5)
    default = ParamSpace(["lateral_friction"]).engine_params([0.4])
    assert default == EngineParams().replace(lateral_friction=0.4)
    with pytest.raises(ParameterError, match="restitution"):
        space.engine_params([1.5, 2e5])
