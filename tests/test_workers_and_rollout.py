"""Rollouts over worker processes: the same results for any number of workers."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.data import load_tosses
from residualsim.errors import DataError
from residualsim.sim.rollout import simulate_trajectories
from residualsim.parallel import WorkerError
from residualsim.sim.pool import engine_workers

BUNDLED = "data/samples/cube-synthetic"


@pytest.fixture(scope="module")
def bundled(request):
    root = request.config.rootpath
    return load_tosses(root / BUNDLED)


def test_one_and_two_workers_agree_exactly(bundled):
    one = simulate_trajectories("cube", bundled, "lateral_friction=0.18,restitution=0.3",
                                n_workers=1)
    two = simulate_trajectories("cube", bundled, "lateral_friction=0.18,restitution=0.3",
                                n_workers=2)
    assert list(one) == list(two) == list(bundled)
    for traj_id in one:
        np.testing.assert_array_equal(one[traj_id].states, two[traj_id].states)


def test_true_parameters_reproduce_the_synthetic_recordings(bundled):
    """The bundled tosses were made with mu = 0.18, e = 0.3 and 1 mm / 5 mrad noise."""
    def rmse(params):
        results = simulate_trajectories("cube", bundled, params)
        return np.mean([np.sqrt(np.mean(np.sum(
            (results[k].positions_m - bundled[k].positions_m) ** 2, axis=1))) for k in bundled])

    truth = rmse("lateral_friction=0.18,restitution=0.3")
    assert truth < 0.01
    assert rmse(None) > 3 * truth


def _explode(engine, item, payload):
    raise RuntimeError("boom in a worker")


def test_a_failing_worker_raises_with_its_traceback():
    with engine_workers("cube", [1, 2, 3, 4], n_workers=2) as pool:
        with pytest.raises(WorkerError, match="boom in a worker"):
            pool.map(_explode)


def test_recordings_at_different_rates_are_refused(bundled):
    first = next(iter(bundled.values()))
    import dataclasses

    slower = dataclasses.replace(first, traj_id="slow", times_s=first.times_s * 2)
    with pytest.raises(DataError, match="different rates"):
        simulate_trajectories("cube", {"a": first, "slow": slower})


def test_real_tosses_one_and_two_workers_agree(shared_data):
    tosses = load_tosses(shared_data / "contactnets-cube", limit=24)
    one = simulate_trajectories("cube", tosses, n_workers=1)
    two = simulate_trajectories("cube", tosses, n_workers=2)
    for traj_id in tosses:
        np.testing.assert_array_equal(one[traj_id].positions_m, two[traj_id].positions_m)
        assert one[traj_id].positions_m.shape == tosses[traj_id].positions_m.shape
