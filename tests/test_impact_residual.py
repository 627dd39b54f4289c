"""Planar-impact residual model and baselines: best impulses, the energy guard, the GP
residual, training without re-simulation, and the figures on the real MCube impacts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residualsim.data.impacts import PlanarImpacts
from residualsim.errors import ParameterError
from residualsim.residual.impact import (
    GPImpactResidual, best_impulses, guarded_correction, handedness_consistent_models,
    impact_contacts, impact_rmse, train_impact_residual)

K = 0.0192


def synthetic_impacts(n: int = 120, seed: int = 0) -> PlanarImpacts:
    """Ellipse-like impacts: contact point below the centre, falling at 2-3 m/s."""
    rng = np.random.default_rng(seed)
    r_x, r_y = rng.uniform(-0.01, 0.01, n), rng.uniform(-0.035, -0.025, n)
    pre = np.column_stack([np.zeros(n), -r_y, rng.uniform(-0.3, 0.3, n),
                           rng.uniform(-0.5, 0.5, n), rng.uniform(-3.0, -2.0, n),
                           rng.uniform(-5, 5, n)])
    normal = np.column_stack([np.zeros(n), np.ones(n), r_x])
    tangent = np.column_stack([np.ones(n), np.zeros(n), -r_y])
    return PlanarImpacts(pre_state=pre, post_state=pre.copy(), rows=np.arange(n),
                         normal_jacobian=normal, tangent_jacobian=tangent,
                         best_impulse=np.zeros((n, 2)), mass_kg=0.0364,
                         radius_of_gyration_m=K)


def test_velocity_changes_and_impulses_are_inverse():
    contacts = impact_contacts(synthetic_impacts())
    impulses = np.random.default_rng(1).normal(size=(120, 2)) * 0.05
    back = contacts.impulses_of(contacts.velocity_changes(impulses))
    np.testing.assert_allclose(back, impulses, atol=1e-12)
    assert contacts.features.shape == (120, 5) and contacts.jacobians.shape == (120, 2, 3)
    # the first row is the normal: the pre-contact normal velocity is the approach speed
    normal_speed = np.einsum("nv,nv->n", contacts.jacobians[:, 0], contacts.pre_velocity)
    assert (normal_speed < 0).all()


def test_best_impulses_recover_an_impulse_inside_the_cone_and_stay_in_it():
    contacts = impact_contacts(synthetic_impacts())
    rng = np.random.default_rng(2)
    inside = np.column_stack([rng.uniform(0.05, 0.1, 120), rng.uniform(-0.01, 0.01, 120)])
    post = contacts.pre_velocity + contacts.velocity_changes(inside)
    np.testing.assert_allclose(best_impulses(contacts, post, 0.3), inside, atol=1e-12)
    outside = np.column_stack([rng.uniform(0.05, 0.1, 120), rng.uniform(0.05, 0.1, 120)])
    post = contacts.pre_velocity + contacts.velocity_changes(outside)
    best = best_impulses(contacts, post, 0.2)
    assert (best[:, 0] >= 0).all() and (np.abs(best[:, 1]) <= 0.2 * best[:, 0] + 1e-12).all()

    def error(impulse: np.ndarray, i: int) -> float:  # M-weighted velocity error
        change = contacts.velocity_changes(np.tile(impulse, (120, 1)))[i]
        d = contacts.pre_velocity[i] + change - post[i]
        return float(d @ contacts.mass_matrix @ d)

    for i in range(0, 120, 17):  # no cone point does better than p*
        for _ in range(50):
            p_n = rng.uniform(0, 0.2)
            trial = np.array([p_n, rng.uniform(-0.2, 0.2) * p_n])
            assert error(best[i], i) <= error(trial, i) + 1e-15
    with pytest.raises(ParameterError):
        best_impulses(contacts, post, -0.1)


def test_guard_never_adds_kinetic_energy_nor_pushes_into_the_floor():
    contacts = impact_contacts(synthetic_impacts())
    rng = np.random.default_rng(3)
    engine = contacts.pre_velocity * np.array([0.5, -0.6, 0.5])  # a bounce that lost energy
    kicks = rng.normal(size=(120, 2)) * 0.2
    post, alpha = guarded_correction(contacts, engine, kicks)
    mass = contacts.mass_matrix
    kinetic = lambda v: 0.5 * np.einsum("ni,ij,nj->n", v, mass, v)  # noqa: E731
    assert (kinetic(post) <= kinetic(contacts.pre_velocity) + 1e-12).all()
    normal = lambda v: np.einsum("nv,nv->n", contacts.jacobians[:, 0], v)  # noqa: E731
    assert (normal(post) >= np.minimum(0.0, normal(engine)) - 1e-12).all()
    assert (alpha < 1).any() and (alpha == 1).any() and (alpha >= 0).all()
    # a small correction that removes energy passes untouched
    small, alpha_small = guarded_correction(contacts, engine, -0.001 * kicks)
    assert impact_rmse(small, engine, K) < impact_rmse(post, engine, K)


def _with_hidden_residual(seed: int = 4):
    """Impacts whose recorded outcome is the 'engine' plus a smooth residual of the
    features: the case a residual model is for."""
    impacts = synthetic_impacts(400, seed)
    contacts = impact_contacts(impacts)
    engine = contacts.pre_velocity * np.array([0.6, -0.5, 0.4])
    slip = contacts.features[:, 4]  # tangential contact velocity
    residual = np.column_stack([0.004 * np.tanh(slip), -0.006 * slip])
    recorded = engine + contacts.velocity_changes(residual)
    return contacts, engine, recorded


def test_gp_residual_learns_a_smooth_correction():
    contacts, engine, recorded = _with_hidden_residual()
    train, test = np.arange(300), np.arange(300, 400)
    sub = lambda c, i: type(c)(c.features[i], c.jacobians[i], c.mass_matrix,  # noqa: E731
                               c.pre_velocity[i], c.radius_of_gyration_m)
    gp = GPImpactResidual(friction=5.0, seed=0).fit(sub(contacts, train), engine[train],
                                                   recorded[train])
    before = impact_rmse(engine[test], recorded[test], K)
    after = impact_rmse(gp.predict(sub(contacts, test), engine[test]), recorded[test], K)
    assert after < 0.5 * before
    with pytest.raises(ParameterError):
        GPImpactResidual(1.0).predict(contacts, engine)


@pytest.mark.slow
def test_training_lowers_the_held_out_error_without_resimulating(tmp_path):
    contacts, engine, recorded = _with_hidden_residual(5)
    train, validation = np.arange(300), np.arange(300, 400)
    policy, figures = train_impact_residual(contacts, engine, recorded, train, validation,
                                            friction=5.0, budget=240, validate_every=40,
                                            checkpoint=tmp_path / "c.npz")
    assert figures["validation_rmse_mps"] < 0.8 * figures["engine_validation_rmse_mps"]
    assert figures["evaluations"] <= 240 and figures["n_parameters"] == policy.n_parameters
    again, figures_again = train_impact_residual(contacts, engine, recorded, train, validation,
                                                 friction=5.0, budget=240, validate_every=40,
                                                 checkpoint=tmp_path / "c.npz", resume=True)
    np.testing.assert_array_equal(again.get_flat(), policy.get_flat())  # replayed exactly


def test_supervised_fit_learns_the_hidden_residual_and_starts_training():
    from residualsim.residual.impact import fit_impact_residual_supervised

    contacts, engine, recorded = _with_hidden_residual(5)
    train, validation = np.arange(300), np.arange(300, 400)
    policy, figures = fit_impact_residual_supervised(
        contacts, engine, recorded, train, validation, friction=5.0, hidden=(6,),
        epochs=400, validate_every=50)
    engine_rmse = impact_rmse(engine[validation], recorded[validation], K)
    assert figures["validation_rmse_mps"] < 0.8 * engine_rmse
    again, _ = fit_impact_residual_supervised(
        contacts, engine, recorded, train, validation, friction=5.0, hidden=(6,),
        epochs=400, validate_every=50)
    np.testing.assert_array_equal(again.get_flat(), policy.get_flat())  # seeded
    start = policy.get_flat()
    refined, cma = train_impact_residual(contacts, engine, recorded, train, validation,
                                         friction=5.0, budget=16, validate_every=8,
                                         start=policy)
    assert refined is policy and refined.hidden == (6,)
    assert cma["validation_rmse_mps"] <= figures["validation_rmse_mps"] + 1e-6
    assert not np.array_equal(start, np.zeros_like(start))


def test_real_impact_figures(mcube_dir):
    from residualsim.data import load_impacts
    from residualsim.data.splits import split_ids

    impacts = load_impacts(mcube_dir, convention="corrected")
    validation = set(split_ids(impacts.rows.tolist())["validation"])
    index = np.array([i for i, r in enumerate(impacts.rows) if str(r) in validation])
    recorded = impacts.post_state[index, 3:6]
    consistent = handedness_consistent_models(impacts)
    stored = {m: impact_rmse(v[index], recorded, K) for m, v in
              impacts.model_post_velocity.items()}
    fixed = {m: impact_rmse(v[index], recorded, K) for m, v in consistent.items()}
    # measured: stored 0.94-0.99 m/s, handedness-consistent 0.64 (Whittaker) to 0.84
    assert 0.9 < min(stored.values()) and max(stored.values()) < 1.0
    assert min(fixed.values()) == pytest.approx(0.641, abs=0.01)
    assert all(fixed[m] < stored[m] for m in stored)
    contacts = impact_contacts(impacts)
    sub = np.isin(np.arange(impacts.n_impacts), index)
    from dataclasses import replace
    part = replace(contacts, features=contacts.features[sub], jacobians=contacts.jacobians[sub],
                   pre_velocity=contacts.pre_velocity[sub])
    best = part.pre_velocity + part.velocity_changes(best_impulses(part, recorded, 0.177))
    assert impact_rmse(best, recorded, K) == pytest.approx(0.148, abs=0.005)


def test_largest_steps_is_the_largest_feasible_step_on_a_grid():
    from residualsim.sim.contact import largest_steps

    rng = np.random.default_rng(5)
    n = 400
    a, b, c = np.abs(rng.normal(size=n)), rng.normal(size=n), rng.normal(size=n)
    a[::9] = 0.0
    cap = rng.uniform(0.0, 1.0, n)
    alpha = largest_steps(a, b, c, cap)
    grid = np.linspace(0.0, 1.0, 20001)
    for i in range(n):
        inside = grid[(grid <= cap[i]) & (a[i] * grid**2 + b[i] * grid + c[i] <= 0.0)]
        feasible_at_alpha = a[i] * alpha[i] ** 2 + b[i] * alpha[i] + c[i] <= 1e-9
        if alpha[i] > 0.0:
            assert feasible_at_alpha and alpha[i] <= cap[i] + 1e-15
        # nothing on the grid beyond α is feasible, unless it is cut off from 0 (then α = 0)
        if len(inside) and inside[0] == 0.0:
            assert alpha[i] >= inside.max() - 1e-4
    assert (alpha > 0).any() and (alpha == 0).any()
    # four scalars (the rollout's case) take a float branch: the same answers
    scalar = [largest_steps(*map(float, row)) for row in zip(a, b, c, cap)]
    assert all(isinstance(value, float) for value in scalar)
    np.testing.assert_array_equal(scalar, alpha)


def test_spin_feature_is_mirror_invariant_and_appended():
    impacts = synthetic_impacts()
    plain, spinning = impact_contacts(impacts), impact_contacts(impacts, spin=True)
    assert spinning.spin and spinning.features.shape == (120, 6)
    np.testing.assert_array_equal(spinning.features[:, :5], plain.features)
    # mirror the world about x = 0: x, θ and ω change sign, and so do r_x and the tangent row
    pre = impacts.pre_state * np.array([-1, 1, -1, -1, 1, -1])
    mirrored = PlanarImpacts(pre_state=pre, post_state=pre.copy(), rows=impacts.rows,
                             normal_jacobian=impacts.normal_jacobian * np.array([1, 1, -1]),
                             tangent_jacobian=impacts.tangent_jacobian,
                             best_impulse=impacts.best_impulse, mass_kg=impacts.mass_kg,
                             radius_of_gyration_m=K)
    np.testing.assert_allclose(impact_contacts(mirrored, spin=True).features,
                               spinning.features, atol=1e-12)
    # the spin feature is k ω up to the frame's handedness, in m/s
    np.testing.assert_allclose(np.abs(spinning.features[:, 5]), K * np.abs(pre[:, 5]))


def test_a_spin_policy_round_trips_and_needs_the_spin_width(tmp_path):
    from residualsim.residual.policy import ResidualPolicy

    policy = ResidualPolicy.for_scene(True, spin=True, hidden=(4,), seed=3)
    assert policy.n_features == 6 and policy.numpy().spin
    policy.set_flat(np.random.default_rng(0).normal(size=policy.n_parameters))
    policy.save(tmp_path)
    back = ResidualPolicy.load(tmp_path)
    assert back.spin and back.n_features == 6
    x = np.random.default_rng(1).normal(size=(7, 6))
    np.testing.assert_allclose(back.numpy().mean(x), policy.numpy().mean(x))
    # batched and one-at-a-time means agree
    np.testing.assert_allclose(policy.numpy().mean(x),
                               np.array([policy.numpy().mean(row) for row in x]), atol=1e-15)
    with pytest.raises(ParameterError, match="spin"):
        ResidualPolicy(n_features=5, n_outputs=2, spin=True)


def test_shipped_planar_model_beats_the_engine_on_validation(mcube_dir, tmp_path):
    """The shipped model end to end: predict (upstream convention) and score the validation
    impacts; card figures: residual 0.227 m/s against the engine's 0.299."""
    from residualsim.cli import main
    from residualsim.data import load_impacts
    from residualsim.data.splits import split_ids
    from residualsim.residual.impact import predict_impacts
    from residualsim.residual.model import ResidualModel

    shipped = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "planar-ellipse"
    model = ResidualModel.load(shipped)
    assert model.policy.spin and model.info["kind"] == "impacts"
    impacts = load_impacts(mcube_dir, convention="corrected")
    part = impacts.subset(split_ids(impacts.rows.tolist())["validation"])
    recorded = part.post_state[:, 3:6]
    unflip = np.array([-1.0, 1.0, 1.0])  # predictions come back in the upstream x convention
    residual = predict_impacts(model, part).post_velocity[0] * unflip
    engine = predict_impacts(model, part, residual=False).post_velocity[0] * unflip
    assert impact_rmse(residual, recorded, K) == pytest.approx(0.227, abs=0.003)
    assert impact_rmse(engine, recorded, K) == pytest.approx(0.299, abs=0.003)
    out = tmp_path / "pred.npz"
    assert main(["predict", "--model", str(shipped), "--data",
                 str(mcube_dir), "--out", str(out), "--split", "validation"]) == 0
