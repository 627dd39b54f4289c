"""MPEC identification on synthetic point masses: the exact forward model, recovery of μ,
the relaxation driving the complementarity violation down, degenerate input."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.errors import DataError, ParameterError, SolverError
from residualsim.sysid.mpec import (Program, filter_mu, identify_particles, lcp_step,
                                    make_particle_recording, particle_step)


@pytest.mark.parametrize("seed", range(5))
def test_closed_form_step_solves_the_lcp(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        q = np.array([rng.normal(), rng.choice([0.0, rng.uniform(0, 0.3)])])
        v, force = rng.normal(size=2) * 2, np.array([rng.normal() * 5, -9.81])
        mu, h = rng.uniform(0, 1), 0.05
        q_lcp, v_lcp, z = lcp_step(q, v, force, mu, h)
        q_cf, v_cf, lam_n = particle_step(q, v, force, mu, h)
        np.testing.assert_allclose(v_lcp, v_cf, atol=1e-9)
        np.testing.assert_allclose(q_lcp, q_cf, atol=1e-9)
        assert z[0] == pytest.approx(lam_n, abs=1e-8)
        # the complementarity conditions hold exactly
        w = [q_lcp[1], z[3] + v_lcp[0], z[3] - v_lcp[0], mu * z[0] - z[1] - z[2]]
        assert min(w) > -1e-9 and max(abs(a * b) for a, b in zip(z, w)) < 1e-8


def test_sliding_particle_matches_the_analytic_acceleration():
    recording = make_particle_recording([0.2], [0.0, 3.0], [5.0, -9.81], noise=0.0)
    x = recording.positions[0, :, 0]
    # on the floor the horizontal acceleration is (5 - 0.2 g) m/s^2
    accel = np.diff(x, 2)[-20:] / 0.05 ** 2
    np.testing.assert_allclose(accel, 5 - 0.2 * 9.81, rtol=1e-9)
    assert recording.positions[0, -1, 1] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("noise", [5e-4, 5e-2])
def test_recovers_mu_of_the_seed_experiment(noise):
    recording = make_particle_recording([0.2], [0.0, 3.0], [5.0, -9.81], noise=noise, rng=0)
    estimate = identify_particles(recording, noise_bound=noise)
    assert abs(estimate.mu[0] - 0.2) < 1e-3
    report = estimate.report
    assert report["solver_status"] == "Solve_Succeeded"
    assert report["complementarity_violation"] < 1e-5


def test_relaxation_drives_the_violation_down():
    recording = make_particle_recording([0.3], [0.0, 1.0], [5.0, -9.81], n_steps=40,
                                        noise=5e-3, rng=1)
    solves = identify_particles(recording, noise_bound=5e-3).report["solves"]
    violations = [s["violation_min"] for s in solves]
    assert violations[-1] < 1e-3 * violations[0]
    assert violations[-1] < 1e-5
    assert all(s["iterations"] > 0 and s["seconds"] > 0 for s in solves)


def test_separate_and_joint_solves_agree():
    recording = make_particle_recording([0.1, 0.4], [[0.0, 0.5], [3.0, 1.0]], [5.0, -9.81],
                                        n_steps=40, noise=1e-3, rng=2)
    separate = identify_particles(recording, noise_bound=1e-3)
    joint = identify_particles(recording, noise_bound=1e-3, joint=True)
    np.testing.assert_allclose(separate.mu, joint.mu, atol=1e-5)
    np.testing.assert_allclose(separate.mu, [0.1, 0.4], atol=1e-3)


def test_degenerate_input_is_refused():
    flight = make_particle_recording([0.2], [0.0, 30.0], [5.0, -9.81], n_steps=20, noise=1e-3,
                                     rng=0)
    with pytest.raises(DataError, match="no particle touches"):
        identify_particles(flight)
    bad = make_particle_recording([0.2], [0.0, 1.0], [5.0, -9.81], n_steps=20, rng=0)
    bad.observed[0, 3, 1] = np.nan
    with pytest.raises(DataError, match="NaN"):
        identify_particles(bad)
    for bounds in [(0.0, 1.5), (-0.1, 0.5), (0.6, 0.4)]:
        with pytest.raises(ParameterError, match="0 <= low <= high <= 1"):
            identify_particles(flight, mu_bounds=bounds)


def test_infeasible_program_names_ipopt_status():
    program = Program()
    x = program.var("x", 2, init=0.0)
    program.constrain(x[0] + x[1], 3.0, 3.0)
    program.complement(x[0] - 2.0, x[1] - 2.0)  # x >= 2 each, x0 + x1 = 3: infeasible
    program.minimize(x[0] ** 2)
    with pytest.raises(SolverError, match="status Infeasible_Problem_Detected") as caught:
        program.solve((1e-2,))
    assert caught.value.status == "Infeasible_Problem_Detected"


def test_particle_filter_is_seeded_and_close():
    recording = make_particle_recording([0.2], [0.0, 3.0], [5.0, -9.81], noise=5e-3, rng=0)
    first, again = filter_mu(recording, 2000, rng=3), filter_mu(recording, 2000, rng=3)
    assert first.mu[0] == again.mu[0]
    assert abs(first.mu[0] - 0.2) < 0.02


def test_hold_keeps_a_block_at_its_guess_until_the_last_solve():
    from residualsim.sysid.mpec.relaxation import Program

    prog = Program()
    x = prog.var("x", 1, 0.0, 3.0, init=0.5)[0]
    y = prog.var("y", 1, 0.0, 3.0, init=1.0)[0]
    prog.complement(x, y)
    prog.minimize((x - 2.0) ** 2 + (y - 0.0) ** 2)
    result = prog.solve((1e-2, 1e-6), hold=("x",))
    assert result.solves[0].objective == pytest.approx(2.25, abs=1e-3)  # x held at 0.5
    assert result.values["x"][0] == pytest.approx(2.0, abs=1e-3)
    with pytest.raises(ValueError, match="unknown variable blocks"):
        prog.solve((1e-2,), hold=("nope",))


def test_a_compiled_program_is_reused_with_new_parameter_values():
    from residualsim.sysid.mpec.relaxation import Program

    prog = Program()
    target = prog.param("target", 1)[0]
    x = prog.var("x", 1, 0.0, 3.0, init=1.0)[0]
    y = prog.var("y", 1, 0.0, 3.0, init=1.0)[0]
    prog.complement(x, y)
    prog.minimize((x - target) ** 2 + (y - 1.0) ** 2)
    compiled = prog.compile()
    for value in (0.2, 2.5):  # below / above the switch at 1: x or y takes the other's place
        result = compiled.solve((1e-2, 1e-6), params={"target": value})
        assert result.values["x"][0] == pytest.approx(value if value > 1 else 0.0, abs=1e-3)
    with pytest.raises(ValueError, match="parameter values missing"):
        compiled.solve((1e-2,))
    with pytest.raises(ValueError, match="compile"):
        prog.solve((1e-2,))
