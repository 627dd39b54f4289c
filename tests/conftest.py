"""Shared fixtures: where the real data lives, and small synthetic trajectories.

The real data sets live beside the repository in ``../shared/data`` (CI clones the project
with ``shared/`` next to it) or wherever ``RESIDUALSIM_DATA`` points; tests that need them
skip with the reason when they are absent.  Never copy real files into the repository (the
demo's eight bundled training tosses under ``data/samples/contactnets-cube`` are the one
exception, with their licence); tests that need a damaged copy write it to ``tmp_path``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _data_dir() -> Path:
    configured = os.environ.get("RESIDUALSIM_DATA")
    return Path(configured) if configured else DEFAULT_DATA_DIR


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data directory (``RESIDUALSIM_DATA`` or ``../shared/data``), else skip."""
    path = _data_dir()
    if not path.is_dir():
        pytest.skip(f"real data not found at {path}: set RESIDUALSIM_DATA")
    return path


@pytest.fixture(scope="session")
def contactnets_dir(shared_data: Path) -> Path:
    """The ContactNets cube set (``contactnets-cube``), else skip."""
    path = shared_data / "contactnets-cube"
    if not (path / "tosses").is_dir():
        pytest.skip(f"real data not found at {path}: set RESIDUALSIM_DATA")
    return path


@pytest.fixture(scope="session")
def mcube_dir(shared_data: Path) -> Path:
    """The MCube planar ellipse set (``planar-impact-ellipse``), else skip."""
    path = shared_data / "planar-impact-ellipse"
    if not (path / "data_ellipse.mat").is_file():
        pytest.skip(f"real data not found at {path}: set RESIDUALSIM_DATA")
    return path


@pytest.fixture(scope="session")
def real_tosses(contactnets_dir: Path) -> dict:
    """All real tosses, loaded once per session."""
    from residualsim.data import load_tosses

    return load_tosses(contactnets_dir)


def make_toss_array(n_samples: int = 40, seed: int = 0) -> np.ndarray:
    """A synthetic upstream ``(1, T, 19)`` toss: free flight with a constant spin.

    Half-width units and a body-frame angular velocity, like the real files.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(n_samples) / 148.0
    omega_world = rng.normal(size=3) * 5.0
    angle = np.linalg.norm(omega_world) * t
    axis = omega_world / np.linalg.norm(omega_world)
    q0 = rng.normal(size=4)
    q0 /= np.linalg.norm(q0)
    dq = np.column_stack([np.cos(angle / 2), np.sin(angle / 2)[:, None] * axis])
    w1, v1 = dq[:, :1], dq[:, 1:]
    w2, v2 = q0[0], q0[1:]
    quat = np.column_stack([w1[:, 0] * w2 - v1 @ v2, w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    from residualsim.data.contactnets import quaternion_to_matrix

    omega_body = np.einsum("tji,j->ti", quaternion_to_matrix(quat), omega_world)
    velocity = np.array([0.5, -0.3, 2.0]) - np.outer(t, [0.0, 0.0, 187.2])
    position = np.array([0.0, 0.0, 4.0]) + np.outer(t, [0.5, -0.3, 2.0]) - 0.5 * np.outer(
        t**2, [0.0, 0.0, 187.2]
    )
    out = np.zeros((1, n_samples, 19))
    out[0, :, 0:3] = position
    out[0, :, 3:7] = quat
    out[0, :, 7:10] = velocity
    out[0, :, 10:13] = omega_body
    return out


@pytest.fixture
def toss_array() -> np.ndarray:
    """A valid synthetic upstream toss array of 40 samples."""
    return make_toss_array()


@pytest.fixture(scope="session")
def make_toss():
    """The synthetic toss factory ``make_toss(n_samples=40, seed=0) -> (1, T, 19) array``."""
    return make_toss_array


def write_mcube_dir(directory: Path, n_rows: int = 6, seed: int = 0) -> dict:
    """Write a small synthetic planar impact set in the upstream layout; return its arrays.

    The models' post-velocities satisfy v = v_i + M^-1 (n^T p_n + d^T p_t) with
    k^2 = 3.7e-4, as in the published files.
    """
    import scipy.io

    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    r_x = rng.uniform(-0.01, 0.01, n_rows)
    r_y = rng.uniform(-0.035, -0.025, n_rows)
    normal = np.column_stack([np.zeros(n_rows), np.ones(n_rows), r_x])
    tangent = np.column_stack([np.ones(n_rows), np.zeros(n_rows), -r_y])
    states_i = rng.normal(size=(n_rows, 6))
    states_f = rng.normal(size=(n_rows, 6))
    p_models = rng.normal(size=(n_rows, 12)) * 0.01
    inverse_mass = 1.0 / (0.0364 * np.array([1.0, 1.0, 3.7e-4]))
    v_models = np.concatenate(
        [
            states_i[:, 3:6]
            + inverse_mass * (normal * p_models[:, [2 * j + 1]] + tangent * p_models[:, [2 * j]])
            for j in range(6)
        ],
        axis=1,
    )
    arrays = {
        "states_i": states_i,
        "states_f": states_f,
        "n": normal,
        "d": tangent,
        "p_data": rng.normal(size=(n_rows, 2)) * 0.01,
        "p_models": p_models,
        "v_models": v_models,
        "rows": np.arange(n_rows) * 3 + 1,
    }
    data = {k: arrays[k] for k in ("states_i", "states_f", "n", "d")}
    scipy.io.savemat(directory / "data_ellipse.mat", {"data": data})
    scipy.io.savemat(directory / "p_true_data.mat", {"p_data": arrays["p_data"]})
    scipy.io.savemat(directory / "p_models.mat", {"p_models": p_models})
    scipy.io.savemat(directory / "v_models.mat", {"v_models": v_models})
    (directory / "original_rows.txt").write_text("".join(f"{r}\n" for r in arrays["rows"]))
    return arrays


@pytest.fixture(scope="session")
def make_mcube():
    """The synthetic planar-impact set writer ``make_mcube(directory, n_rows=6, seed=0)``."""
    return write_mcube_dir


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs for the tests of the ``ray`` backend, started once per module
    (~5 s) and shut down at its end (its daemons would otherwise poll, beside the rest of the
    suite, until the session ends); skips when Ray is not installed."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, namespace="residualsim",
                 log_to_driver=False)
    yield ray
    ray.shutdown()


def quiet_main(*argv) -> tuple[int, str, str]:
    """``residualsim.cli.main(argv)`` with stdout and stderr captured and warnings silenced:
    (exit code, stdout, stderr). For module-scoped fixtures, where capsys is not available."""
    import contextlib
    import io
    import warnings

    from residualsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def load_train_script(name: str):
    """The module of ``train/<name>.py`` (the training scripts are not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "train" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def train_script():
    """``train_script(name)``: the module of ``train/<name>.py``."""
    return load_train_script


class QuadraticLikelihood:
    """Stand-in likelihood: recording i's log-likelihood −½ a |θ − θ_i|² (unit coordinates
    of the space), served as errors e_i = exp(−2 ℓ_i / ν_i)."""

    def __init__(self, space, modes: np.ndarray, curvature: float) -> None:
        self.space, self.modes, self.a = space, modes, curvature
        self.n_items = len(modes)
        self.nu = np.full(self.n_items, 50.0)

    def errors(self, batch) -> np.ndarray:
        z = self.space.to_unit(np.array([[p.lateral_friction, p.restitution] for p in batch]))
        ell = -0.5 * self.a * np.sum((z[:, None, :] - self.modes[None]) ** 2, axis=-1)
        return np.exp(-2.0 * ell / self.nu)
