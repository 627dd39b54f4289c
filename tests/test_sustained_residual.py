"""The residual through sustained contact: contact coefficients set at every contact step."""

from __future__ import annotations

import json
import math

import numpy as np
import pybullet as pb
import pytest

from residualsim.errors import ParameterError
from residualsim.residual.coefficients import CoefficientResidual, SustainedPolicy
from residualsim.sim.engine import Engine
from residualsim.sim.rollout import residual_rollout
from residualsim.sim.scenes import EngineSettings, make_scene

HALF_M = 0.0524  # the cube's half width


@pytest.fixture(scope="module")
def engine():
    with Engine("cube", "lateral_friction=0.3,restitution=0.3",
                EngineSettings(dt_s=0.01, substeps=4)) as built:
        yield built


def sliding_state(speed_mps: float = 1.0) -> np.ndarray:
    """The cube resting flat on the table, sliding along +x at ``speed_mps``."""
    state = np.zeros(make_scene("cube").state_size)
    state[2], state[3], state[7] = HALF_M, 1.0, speed_mps
    return state


def constant(factor: float) -> CoefficientResidual:
    """A residual whose multipliers are ``factor`` on the lateral friction, 1 otherwise:
    a head with only a bias (tanh(bias) · ln 3 = ln factor)."""
    net = CoefficientResidual.zeros(np.zeros(10), np.ones(10), hidden=4)
    theta = net.get_flat()
    theta[-3] = math.atanh(math.log(factor) / net.log_bound)
    return net.with_flat(theta)


def test_zero_head_is_the_engine(engine):
    alone = residual_rollout(engine, sliding_state(), 60)
    net = CoefficientResidual.zeros(np.zeros(10), np.ones(10))
    assert np.allclose(net.multipliers(np.ones((5, 10))), 1.0)
    same = residual_rollout(engine, sliding_state(), 60, SustainedPolicy(net))
    np.testing.assert_array_equal(same.states, alone.states)


def test_more_friction_stops_a_sliding_cube_sooner(engine):
    def slide(policy) -> float:
        run = residual_rollout(engine, sliding_state(), 60, policy)
        return float(run.positions_m[-1, 0])

    alone, grippier, slicker = slide(None), slide(SustainedPolicy(constant(2.0))), \
        slide(SustainedPolicy(constant(0.5)))
    assert grippier < alone < slicker
    # μ g t² / 2 to stop from 1 m/s: x = v² / (2 μ g); twice the friction halves it
    assert grippier == pytest.approx(alone / 2, rel=0.15)


def test_the_engine_coefficients_are_back_after_the_rollout(engine):
    before = residual_rollout(engine, sliding_state(), 40)
    residual_rollout(engine, sliding_state(), 40, SustainedPolicy(constant(2.5)))
    dynamics = pb.getDynamicsInfo(engine.scene.body, engine.scene.link,
                                  physicsClientId=engine.client)
    assert dynamics[1] == pytest.approx(0.3)  # lateral friction
    after = residual_rollout(engine, sliding_state(), 40)
    np.testing.assert_array_equal(after.states, before.states)


def test_multipliers_are_bounded_and_the_weights_round_trip():
    net = CoefficientResidual.zeros(np.zeros(10), np.ones(10), hidden=5, seed=3)
    wild = net.with_flat(np.random.default_rng(0).normal(0, 50, net.n_parameters))
    values = wild.multipliers(np.random.default_rng(1).normal(0, 10, (200, 10)))
    assert values.min() >= 1 / 3 - 1e-12 and values.max() <= 3 + 1e-12
    again = CoefficientResidual.from_json(json.loads(json.dumps(wild.as_json())))
    np.testing.assert_array_equal(again.get_flat(), wild.get_flat())
    with pytest.raises(ParameterError, match="finite weights"):
        net.with_flat(np.zeros(3))


def test_event_impulses_still_act_beside_it(engine):
    """The event part of a SustainedPolicy is the event residual: a drop with a constant
    upward-free impulse policy differs from the coefficients alone."""

    class Push:
        spin = contact_mode = False
        n_outputs = 3

        def mean(self, features):
            return np.array([0.0, 0.05, 0.0])  # 0.05 N s along the slip tangent

        def sample(self, features, rng):
            return self.mean(features)

    drop = sliding_state(0.5)
    drop[2], drop[9] = 0.3, -1.0  # above the table, falling
    net = CoefficientResidual.zeros(np.zeros(10), np.ones(10))
    plain = residual_rollout(engine, drop, 60, SustainedPolicy(net))
    pushed = residual_rollout(engine, drop, 60, SustainedPolicy(net, Push()))
    assert pushed.n_events >= 1
    assert not np.allclose(pushed.positions_m[-1], plain.positions_m[-1])


@pytest.mark.parametrize("method", ["particles", "conjugate"])
def test_beliefs_roll_out_the_sustained_part(method):
    """Both belief steps run the model's sustained part in the engine: a cube dropped low
    onto an edge pivots onto a face in contact between its first two events, so with 2.5x
    friction the second event's belief moves; the first's barely does."""
    import dataclasses
    from pathlib import Path

    from scipy.spatial.transform import Rotation

    from residualsim.belief.propagation import GaussianMixtureBelief, propagate_belief
    from residualsim.belief.simulator import INITIAL_STD, toss_state
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.load(Path(__file__).resolve().parents[1] / "data" / "pretrained" /
                               "cube-contactnets")
    grippy = dataclasses.replace(model, sustained=constant(2.5))
    quat = Rotation.from_rotvec([0.3, 0.0, 0.0]).as_quat()[[3, 0, 1, 2]]
    initial = GaussianMixtureBelief.gaussian(
        toss_state([0.0, 0.0, 0.08], quat, [0.8, 0.0, -0.3], [0.0, 0.0, 0.0]), INITIAL_STD,
        planar=False)
    options = dict(draws=30) if method == "conjugate" else dict(n_particles=30)
    # 30 conjugate draws give a noisy mean: seeds 0, 1, 2 put the second event's drop at
    # 0.011, 0.078 and 0.040 m/s, so that step is judged by the mean over the three
    drops = []
    for seed in (0, 1, 2) if method == "conjugate" else (0,):
        plain, slid = (propagate_belief(m, initial, n_events=2, seed=seed, method=method,
                                        **options) for m in (model, grippy))
        assert len(slid) == len(plain) == 2
        speed = [[abs(b.belief.weights @ b.belief.means[:, 6]) for b in run]
                 for run in (plain, slid)]
        drops.append([plain_speed - slid_speed for plain_speed, slid_speed in zip(*speed)])
    drop = np.mean(drops, axis=0)  # m/s
    assert drop[1] > 0.03 and drop[1] > 2 * abs(drop[0])  # slower after the pivot


def test_a_model_with_a_malformed_sustained_part_is_refused(tmp_path):
    """model.json's ``sustained`` network must chain 10 features to 3 finite multipliers:
    else loading names the file (a DataError), never a half-built model."""
    import dataclasses
    import shutil
    from pathlib import Path

    from residualsim.errors import DataError
    from residualsim.residual.model import ResidualModel

    source = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"
    model = dataclasses.replace(ResidualModel.load(source), sustained=constant(2.0))
    model.save(tmp_path / "good")
    assert ResidualModel.load(tmp_path / "good").sustained is not None
    for name, broken in (("short", lambda n: n["layers"][1][0].pop()),
                         ("nan", lambda n: n["feature_std"].__setitem__(0, float("nan")))):
        folder = tmp_path / name
        shutil.copytree(tmp_path / "good", folder)
        header = json.loads((folder / "model.json").read_text())
        broken(header["sustained"])
        (folder / "model.json").write_text(json.dumps(header))
        with pytest.raises(DataError, match="model.json"):
            ResidualModel.load(folder)
