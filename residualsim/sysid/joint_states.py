"""Residuals with each recording's initial state among the unknowns.

A recording of poses only has no initial velocity: it was *fitted* to the free flight when
the recording was read (:func:`residualsim.sim.recordings.fit_initial_state`), with the
user's URDF. Fitting the body afterwards on the same free flight, from those fixed states,
leaves the body wrong: the velocities have already absorbed what the body should explain
(synthetic hinge tosses, train/README.md §19). So ``calibrate --method lsq`` fits the
parameters θ and every such recording's initial-state offset s_i together:

    min_{θ, s_1..s_N}  Σ_i Σ_k ρ(r_ik(θ, s_i)),

the offsets in the unknowns of :func:`~residualsim.sim.recordings.offset_initial_state`
(position m and rotation vector rad, world frame; linear m/s and angular rad/s velocity,
world frame; each joint's position and velocity). Recording i's residuals depend on θ and
on its own s_i only, so the Jacobian is a dense block for θ beside a block diagonal for the
offsets: a forward difference costs d + 1 parameter sets for θ and only k more for all the
offsets (component j of every s_i moved at once, k = 12 + 2 joints for a free base). The
step is Levenberg-Marquardt's with the offsets eliminated through the Schur complement
(:func:`schur_levenberg_marquardt`), the way bundle adjustment eliminates its points: exact
and cheap however many recordings there are. SciPy's sparse trust region (LSMR) was tried
first: its inexact steps stalled (pose-only hinge tosses: robust loss 2.8e-4 per recording
where the truth reaches 5.1e-5), and a dense exact solve costs an SVD of (samples × 7) ×
(d + 16 n) per step (4 s for 72 recordings, 100 s for 210).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError
from residualsim.sim.engine import Engine
from residualsim.sim.pool import engine_workers
from residualsim.sim.recordings import (offset_initial_state, rollout_residuals,
                                         with_initial_state)
from residualsim.sim.scenes import EngineParams, EngineSettings, make_scene
from residualsim.sim.scenes.params import body_of

__all__ = ["StateBlock", "OffsetResiduals", "estimated_ids", "apply_offsets",
           "schur_levenberg_marquardt"]

#: Forward-difference steps of the offsets: position m, rotation rad, velocity m/s,
#: angular velocity rad/s; a joint's position (rad or m) and velocity.
POSE_STEP, VELOCITY_STEP = 1e-4, 1e-3
#: Typical size of each kind of offset, the unit of the search's "has it stopped moving"
#: test: 5 mm, 0.05 rad, 5 cm/s, 0.5 rad/s; joints 0.05 and 0.5.
POSE_SCALE, VELOCITY_SCALE = 0.005, 0.05


@dataclass(frozen=True)
class StateBlock:
    """The offsets' layout in a residual vector: ``items`` (recording index, first row,
    end row) for each recording with an offset, ``k`` unknowns each, their difference
    ``step`` (k,) and typical ``scale`` (k,), in the units of
    :func:`~residualsim.sim.recordings.offset_initial_state`."""

    items: tuple[tuple[int, int, int], ...]
    k: int
    step: np.ndarray
    scale: np.ndarray

    @property
    def size(self) -> int:
        return len(self.items) * self.k


def estimated_ids(trajectories: Mapping[str, Trajectory]) -> list[str]:
    """Ids of the recordings whose velocities were estimated (poses only)."""
    return [k for k, t in trajectories.items() if t.metadata.get("velocities") == "estimated"]


def _kinds(scene, n_joints: int) -> tuple[np.ndarray, np.ndarray]:
    pose = [True] * 3 + [False] * 3 if scene.planar else \
        [True] * 6 + [False] * 6 + [True] * n_joints + [False] * n_joints
    pose = np.array(pose)
    return (np.where(pose, POSE_STEP, VELOCITY_STEP), np.where(pose, POSE_SCALE, VELOCITY_SCALE))


def offset_residuals(engine: Engine, item: tuple, batch: Sequence[tuple]) -> np.ndarray:
    """Worker function: the residual rows (as
    :func:`~residualsim.sysid.likelihood.trajectory_residuals`) of one recording for each
    ``(params, offsets (n_items, k) or None)`` of ``batch``; ``item`` leads with its
    recording's index."""
    index, initial_state, *recorded = item
    rows = []
    for params, offsets in batch:
        if engine.params != params:
            engine.set_params(params)
        start = initial_state if offsets is None or not np.any(offsets[index]) else \
            offset_initial_state(engine.scene, initial_state, offsets[index])
        rows.append(rollout_residuals(engine, start, *recorded))
    return np.array(rows)


class OffsetResiduals:
    """Per-sample residuals of recordings (metres, see
    :func:`~residualsim.sysid.likelihood.trajectory_residuals`) over their first
    ``horizons`` samples, as a function of parameter sets and initial-state offsets of the
    recordings ``with_offsets`` (ids); call ``(params list, offsets (n, n_offset_items, k))``.
    Workers persist until :meth:`close`."""

    def __init__(self, scene: str, trajectories: Mapping[str, Trajectory],
                 settings: EngineSettings, horizons: Sequence[int], with_offsets: Sequence[str],
                 n_workers: int = 1, rotation_weight: float = 1.0) -> None:
        if not trajectories:
            raise DataError("no recordings to calibrate on")
        layout = make_scene(scene)
        radius = layout.radius_of_gyration_m * math.sqrt(rotation_weight)
        n_joints = getattr(layout, "n_joints", 0)
        scale = np.array([layout.radius_of_gyration_m if kind == "revolute" else 1.0
                          for kind in layout.info.joint_types]) if n_joints else None
        items, blocks, row = [], [], 0
        wanted = set(with_offsets)
        self.ids = list(trajectories)
        self.spans: list[tuple[int, int]] = []  # each recording's rows (first, end)
        self._slot = {}
        for index, (key, traj) in enumerate(trajectories.items()):
            n = min(traj.n_samples, max(2, int(horizons[index]) + 1))
            states = np.array([layout.state_from_trajectory(traj, i) for i in range(n)])
            positions, quat, _, _ = layout.rigid_motion(states)
            item = (index, states[0], positions[1:], quat[1:], radius)
            if n_joints:
                item += (layout.joint_positions(states)[1:], scale)
            items.append(item)
            width = (n - 1) * (6 + n_joints)
            self.spans.append((row, row + width))
            if key in wanted:
                self._slot[index] = len(blocks)
                blocks.append((index, row, row + width))
            row += width
        self.n_rows = row
        step, trust = _kinds(layout, n_joints)
        self.block = StateBlock(tuple(blocks), len(step), step, trust)
        self.n_items = len(items)
        self._pool = engine_workers(scene, items, n_workers, settings)
        self.n_rollouts = 0

    def __call__(self, batch: Sequence[EngineParams], offsets: np.ndarray | None = None
                 ) -> np.ndarray:
        """Residuals, shape (len(batch), n_rows); ``offsets`` (len(batch), offset items, k)
        or None (all zero)."""
        batch = list(batch)
        if len(batch) > 1 and len({body_of(p) for p in batch}) > 1:  # one body per map
            return np.concatenate([self([p], None if offsets is None else offsets[b:b + 1])
                                   for b, p in enumerate(batch)])
        full = [None] * len(batch)
        if offsets is not None and self.block.items:
            for b in range(len(batch)):
                full[b] = np.zeros((self.n_items, self.block.k))
                for index, slot in self._slot.items():
                    full[b][index] = offsets[b, slot]
        pairs = list(zip(batch, full))
        per_item = self._pool.map(offset_residuals, pairs)
        self.n_rollouts += len(batch) * self.n_items
        return np.concatenate([np.asarray(rows, dtype=np.float64) for rows in per_item],
                              axis=1)

    def close(self) -> None:
        self._pool.close()


def apply_offsets(scene: str, trajectories: Mapping[str, Trajectory], ids: Sequence[str],
                  offsets: np.ndarray) -> dict[str, Trajectory]:
    """``trajectories`` with the initial state of each of ``ids`` moved by its row of
    ``offsets`` (len(ids), k); the others as they are."""
    layout = make_scene(scene)
    out = dict(trajectories)
    for key, offset in zip(ids, offsets):
        state = offset_initial_state(layout, layout.state_from_trajectory(out[key], 0), offset)
        out[key] = with_initial_state(out[key], layout, state,
                                      {"initial_state": "fitted with the parameters (lsq)"})
    return out


def schur_levenberg_marquardt(fun, differences, z0: np.ndarray, d: int, block: StateBlock,
                              f_scale: float, max_iterations: int = 100,
                              tolerance: float = 1e-6) -> str:
    """Minimise Σ ρ(r) (Cauchy, scale ``f_scale`` m) over z = (θ in the unit box [0, 1]^d,
    then the offsets of ``block``'s recordings, k each, unbounded) by Levenberg-Marquardt
    with the offsets eliminated per step (the Schur complement, as bundle adjusters do):
    each recording's k×k block is solved on its own, so a step costs O(n k³ + d³) whatever
    the number of recordings. ``fun(z) -> r`` (m,); ``differences(z, r) -> (m, d + k)``,
    the forward differences along θ and along offset component j of every recording at
    once. The robust loss enters as iteratively reweighted least squares (weights
    ρ'(r²) = 1 / (1 + r²/f²)); damping is Marquardt's (λ times the Gauss-Newton diagonal,
    from λ = 1: smaller first steps jumped to a worse minimum on pose-only hinge tosses);
    θ is projected into its box. Returns the reason it stopped; ``fun`` keeps the best point
    (the caller's budget raises out of here when spent)."""
    k = block.k
    z, r = z0.copy(), fun(z0)
    loss = float(np.sum(np.log1p((r / f_scale) ** 2)))
    lam = 1.0
    for _ in range(max_iterations):
        dr = differences(z, r)
        w = 1.0 / (1.0 + (r / f_scale) ** 2)
        a = dr[:, :d] * w[:, None] ** 0.5
        rw = r * w ** 0.5
        h_zz, g_z = a.T @ a, a.T @ rw
        blocks = []
        for _, first, end in block.items:
            b = dr[first:end, d:] * w[first:end, None] ** 0.5
            blocks.append((b.T @ b, a[first:end].T @ b, b.T @ rw[first:end]))
        diag_z = np.maximum(np.diag(h_zz), 1e-12 * max(1e-300, np.max(np.diag(h_zz))))
        for _ in range(12):  # raise λ until a step lowers the loss
            schur, rhs = h_zz + lam * np.diag(diag_z), -g_z.copy()
            solved = []
            for h_ss, h_zs, g_s in blocks:
                diag_s = np.maximum(np.diag(h_ss), 1e-12 * max(1e-300, np.max(np.diag(h_ss))))
                inv = np.linalg.pinv(h_ss + lam * np.diag(diag_s), hermitian=True)
                schur -= h_zs @ inv @ h_zs.T
                rhs += h_zs @ inv @ g_s
                solved.append((inv, h_zs, g_s))
            step_z = np.linalg.lstsq(schur, rhs, rcond=None)[0]
            candidate = z.copy()
            candidate[:d] = np.clip(z[:d] + step_z, 0.0, 1.0)
            step_z = candidate[:d] - z[:d]
            for slot, (inv, h_zs, g_s) in enumerate(solved):
                candidate[d + slot * k:d + (slot + 1) * k] -= inv @ (g_s + h_zs.T @ step_z)
            r_new = fun(candidate)
            new = float(np.sum(np.log1p((r_new / f_scale) ** 2)))
            if new < loss:
                break
            lam *= 5.0
        else:
            return "no step lowers the loss"
        moved = np.max(np.abs(candidate - z) / np.concatenate(
            [np.ones(d), np.tile(block.scale, len(block.items))]))
        done = loss - new < tolerance * loss or moved < 1e-6
        z, r, loss, lam = candidate, r_new, new, max(lam / 3.0, 1e-9)
        if done:
            return "converged"
    return "iterations spent"
