"""Recordings as they come (issue 34 §1): export a clean CSV set in the forms capture systems
write, and measure how residualsim reads and predicts each.

Forms read (each from the clean files; times and poses are re-sampled from them by a cubic
spline for positions and joints and slerp for quaternions where the samples move):

* ``jitter``: time stamps jittered by U(-0.3, 0.3) ms and written to 4 decimals;
* ``gaps``: 5 % of the samples dropped at random, and a run of 6 in every file;
* ``epoch``: times plus a Unix-epoch offset (1.7e9 s), written to 4 decimals;
* ``mixed``: every other file at 120 Hz, the rest at 100 Hz;
* ``semicolon``: ``;``-separated, with a UTF-8 BOM, CRLF line ends and ``#`` comment lines;
* ``tab``: tab-separated, columns in another order.

Forms refused (each must fail with its cause named): ``millimetres``, ``centimetres``,
``milliseconds``, ``y-up``, ``decimal-comma``, ``xyzw`` (x-y-z-w values under a w-x-y-z
header), ``zero-velocities``, ``time-backwards``.

Run (about 6 minutes on 2 cores; synthesizes a hinge set, calibrates and trains on it)::

    python train/recording_forms.py --out /tmp/forms [--workers 2]

prints one table row per form: outcome, and for the read forms the mean base position error
(RMSE over samples, mean over recordings) of the model's predictions against
the clean recordings, next to the clean files' own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parent.parent
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
EPOCH_S = 1_732_579_200.0
READ_FORMS = ("jitter", "gaps", "epoch", "mixed", "semicolon", "tab")
REFUSED_FORMS = ("millimetres", "centimetres", "milliseconds", "y-up", "decimal-comma", "xyzw",
                 "zero-velocities", "time-backwards")


def _interpolator(traj):
    """f(times s) -> (positions, quats w-x-y-z, joints) of a clean trajectory, by a cubic
    spline (positions, joints) and slerp (quaternions)."""
    from scipy.interpolate import CubicSpline
    from scipy.spatial.transform import Rotation, Slerp

    t = np.asarray(traj.times_s)
    position = CubicSpline(t, traj.positions_m)
    joints = CubicSpline(t, traj.joint_positions) if traj.n_joints else None
    slerp = Slerp(t, Rotation.from_quat(np.asarray(traj.quat_wxyz)[:, [1, 2, 3, 0]]))

    def at(times):
        times = np.clip(times, t[0], t[-1])
        quats = slerp(times).as_quat()[:, [3, 0, 1, 2]]
        quats *= np.sign(quats[:, :1] + 1e-300)
        return (position(times), quats,
                joints(times) if joints is not None else np.zeros((len(times), 0)))
    return at


def _columns(traj, times, positions, quats, joints, velocities=None):
    names = ["t", "x", "y", "z", "qw", "qx", "qy", "qz", *traj.joint_names]
    values = [times, *positions.T, *quats.T, *np.asarray(joints).T]
    if velocities is not None:
        names += ["vx", "vy", "vz", "wx", "wy", "wz", *(j + "_vel" for j in traj.joint_names)]
        values += list(velocities)
    return names, values


def _write(path: Path, names, values, sep=",", time_format=lambda v: repr(float(v)), newline="\n", bom=False,
           comments=(), order=None, number=repr):
    order = order or list(range(len(names)))
    lines = list(comments) + [sep.join(names[k] for k in order)]
    table = np.column_stack(values)
    for row in table:
        cells = [time_format(row[0]) if k == 0 else number(float(row[k])) for k in order]
        lines.append(sep.join(cells))
    text = newline.join(lines) + newline
    path.write_bytes((("\ufeff" if bom else "") + text).encode("utf-8"))


def export_form(clean_dir: str | Path, out_dir: str | Path, form: str, seed: int = 0) -> Path:
    """Write the clean CSV recordings of ``clean_dir`` in ``form`` (module docstring) to
    ``out_dir``; returns it. Poses-only files stay poses-only (but ``zero-velocities``)."""
    from residualsim.data import load_csv_trajectories

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    clean = load_csv_trajectories(clean_dir)
    for k, (key, traj) in enumerate(clean.items()):
        at = _interpolator(traj)
        t = np.asarray(traj.times_s)
        path = out / f"{key}.csv"
        base = _columns(traj, t, traj.positions_m, traj.quat_wxyz, traj.joint_positions)
        if form == "jitter":
            stamps = t + rng.uniform(-3e-4, 3e-4, len(t))
            stamps[0] = t[0]
            stamps = np.round(stamps, 4)
            _write(path, *_columns(traj, stamps, *at(stamps)), time_format=lambda v: f"{v:.4f}")
        elif form == "gaps":
            keep = np.ones(len(t), bool)
            keep[3:-3][rng.random(len(t) - 6) < 0.05] = False
            start = int(rng.integers(5, len(t) - 12))
            keep[start:start + 6] = False
            _write(path, *_columns(traj, t[keep], traj.positions_m[keep],
                                   traj.quat_wxyz[keep], traj.joint_positions[keep]))
        elif form == "epoch":
            _write(path, *_columns(traj, t + EPOCH_S, traj.positions_m, traj.quat_wxyz,
                                   traj.joint_positions), time_format=lambda v: f"{v:.4f}")
        elif form == "mixed":
            if k % 2:
                stamps = np.arange(0.0, t[-1] - t[0] + 1e-9, 1 / 120.0) + t[0]
                _write(path, *_columns(traj, stamps, *at(stamps)))
            else:
                _write(path, *base)
        elif form == "semicolon":
            _write(path, *base, sep=";", newline="\r\n", bom=True,
                   comments=("# exported by a capture system", "# units: m, s"))
        elif form == "tab":
            order = list(rng.permutation(len(base[0])))
            _write(path, *base, sep="\t", order=order)
        elif form == "millimetres":
            names, values = base
            _write(path, names, [values[0], *(1000 * v for v in values[1:4]), *values[4:]])
        elif form == "centimetres":
            names, values = base
            _write(path, names, [values[0], *(100 * v for v in values[1:4]), *values[4:]])
        elif form == "milliseconds":
            names, values = base
            _write(path, names, [1000 * values[0], *values[1:]])
        elif form == "y-up":  # world (x, y, z) exported as (x, z, -y): y up
            names, values = base
            turn = np.array([np.cos(np.pi / 4), -np.sin(np.pi / 4), 0, 0])  # -90 deg about x
            from residualsim.sim.rotations import quat_multiply
            quats = quat_multiply(np.broadcast_to(turn, traj.quat_wxyz.shape),
                                  traj.quat_wxyz)
            positions = np.column_stack([values[1], values[3], -values[2]])
            _write(path, *_columns(traj, t, positions, quats, traj.joint_positions))
        elif form == "decimal-comma":
            _write(path, *base, sep=";", number=lambda v: repr(v).replace(".", ","))
        elif form == "xyzw":
            _write(path, *_columns(traj, t, traj.positions_m, traj.quat_wxyz[:, [1, 2, 3, 0]],
                                   traj.joint_positions))
        elif form == "zero-velocities":
            zeros = [np.zeros(len(t))] * (6 + traj.n_joints)
            _write(path, *_columns(traj, t, traj.positions_m, traj.quat_wxyz,
                                   traj.joint_positions, zeros))
        elif form == "time-backwards":
            stamps = t.copy()
            stamps[len(t) // 2] = stamps[len(t) // 2 - 1]
            _write(path, *_columns(traj, stamps, traj.positions_m, traj.quat_wxyz,
                                   traj.joint_positions))
        else:
            raise ValueError(f"unknown form {form!r}")
    for extra in Path(clean_dir).glob("*.json"):
        shutil.copy(extra, out / extra.name)
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "residualsim", *args], capture_output=True,
                          text=True, cwd=ROOT)


def _last_json(process: subprocess.CompletedProcess) -> dict:
    if process.returncode:
        raise RuntimeError(process.stderr.strip().splitlines()[-1])
    return json.loads(process.stdout.strip().splitlines()[-1])


def _position_error(pred: Path, clean: Path) -> float:
    """Base position RMSE (m) over samples, mean over recordings, of a prediction file
    against the CLEAN recordings (over the samples both have: a 120 Hz file resampled to
    100 Hz may end one sample earlier)."""
    from residualsim.data import load_trajectories
    from residualsim.evaluation.predictions import load_predictions

    predictions, recordings = load_predictions(pred), load_trajectories(clean)
    errors = []
    for key in predictions.ids:
        predicted, recorded = predictions[key].position[0], recordings[key].positions_m
        n = min(len(predicted), len(recorded))
        errors.append(np.sqrt(np.mean(np.sum((predicted[:n] - recorded[:n]) ** 2, axis=1))))
    return float(np.mean(errors))


def _prepare(out: Path, clean: Path, count: int, workers: list[str]) -> None:
    """Synthesize the clean hinge set, calibrate two contact parameters, train a model."""
    _last_json(_cli("data", "synthesize", "--scene", str(HINGE), "--params",
                    "lateral_friction=0.4,restitution=0.3", "--count", str(count),
                    "--out", str(clean), "--seed", "3", *workers))
    _last_json(_cli("calibrate", "--scene", str(HINGE), "--data", str(clean), "--params",
                    "lateral_friction,restitution", "--method", "nevergrad", "--budget", "40",
                    "--out", str(out / "cal"), *workers))
    _last_json(_cli("train", "--scene", str(HINGE), "--data", str(clean), "--calibration",
                    str(out / "cal"), "--budget", "60", "--out", str(out / "model"), *workers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a working directory (a rerun reuses "
                        "its model)")
    parser.add_argument("--count", type=int, default=24, help="synthetic tosses")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clean = out / "clean"
    workers = ["--workers", str(args.workers)]
    if not (out / "model" / "model.json").exists():
        _prepare(out, clean, args.count, workers)
    _last_json(_cli("predict", "--model", str(out / "model"), "--data", str(clean), "--out",
                    str(out / "clean.npz"), "--force", *workers))
    rows = [("clean", "read", _position_error(out / "clean.npz", clean), "")]
    for form in READ_FORMS + REFUSED_FORMS:
        folder = export_form(clean, out / form, form)
        pred = out / f"{form}.npz"
        process = _cli("predict", "--model", str(out / "model"), "--data", str(folder),
                       "--out", str(pred), "--force", *workers)
        if process.returncode:
            message = process.stderr.strip().splitlines()[-1]
            rows.append((form, f"refused (exit {process.returncode})", None, message))
        else:
            rows.append((form, "read", _position_error(pred, clean), ""))
    print(f"{'form':<16} {'outcome':<18} {'pos err mm':>10}  message")
    for form, outcome, error, message in rows:
        shown = f"{1000 * error:10.2f}" if error is not None else f"{'-':>10}"
        print(f"{form:<16} {outcome:<18} {shown}  {message[:160]}")
    print(json.dumps({"forms": [dict(zip(("form", "outcome", "position_rmse_m", "message"),
                                         r)) for r in rows]}))


if __name__ == "__main__":
    run_script(main)
