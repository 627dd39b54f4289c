"""``residualsim calibrate``'s options (the command itself: :mod:`residualsim.cli.calibrate`)."""

from __future__ import annotations

import argparse

from residualsim.cli.options import (SCENE_HELP, add_allow_implausible, add_envelope_options,
                                     add_seed, add_split_options, add_workers, count,
                                     kappa_option)

__all__ = ["add_calibrate_arguments"]


def add_calibrate_arguments(cal: argparse.ArgumentParser) -> None:
    """Every option of ``residualsim calibrate``, each help stating its default."""
    cal.add_argument("--scene", default="cube", help=SCENE_HELP.replace(
        " (default cube", "; or arm-loop, the arm + loop's spring stiffnesses (default cube"))
    cal.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    cal.add_argument("--params", default="lateral_friction,restitution",
                     help="comma-separated parameters (default lateral_friction,restitution): "
                     "names or groups: contact (frictions, restitution), soft_contact "
                     "(stiffness, damping), solver (contact_erp, solver_iterations, "
                     "friction_anchor... the scene's engine honours), and for an object from a "
                     "scene file or URDF body (per link: centre of mass, inertia; total mass "
                     "kept) and joints (damping, friction); single names body.<link>.com_x, "
                     ".moment_1, .axes_x, .mass_ratio, joint.<joint>.damping (README)")
    cal.add_argument("--base", help="values of the parameters not calibrated: name=value,..., "
                     "a JSON file or a calibration directory (default PyBullet's)")
    cal.add_argument("--export-urdf", metavar="FILE.urdf",
                     help="also write the scene's URDF with the kept values (default: none): "
                     "the best on validation of the calibrated ones, the URDF's own body with "
                     "the calibrated contact and PyBullet's defaults. A new file (--resume "
                     "rewrites its own), never the scene's own URDF")
    cal.add_argument("--out", required=True, help="output directory (summary.json, plots, "
                     "run.json: one holding another run or command is refused, --resume too)")
    cal.add_argument("--method", choices=("mh", "sandwich", "nevergrad", "mpec", "lsq",
                                          "gradient", "homotopy"),
                     help="mh (its likelihood: --weighting), sandwich (trajectories, noise "
                     "estimated: the Gaussian around the likelihood's envelope with the sandwich "
                     "covariance, ~200 evaluations), nevergrad, lsq (least squares on trajectory "
                     "error, finite differences, --budget parameter sets; body and joints in "
                     "stages) or mpec (complementarity-constrained, no simulator; fits "
                     "lateral_friction, restitution); arm-loop: lsq, gradient, homotopy or mh "
                     "(default: lsq with body or joint names, else mh; nevergrad is refused for "
                     "them; mh samples about lsq's fit). An option of another method is refused")
    cal.add_argument("--init", choices=("sobol", "mpec"), default="sobol", help="mh, sandwich "
                     "only: from the best Sobol points (default; a body: lsq's fit) or MPEC's")
    cal.add_argument("--start-points", type=count(1), default=32, help="mh --init sobol: Sobol "
                     "points per chain, one evaluation each before the first step (default 32)")
    cal.add_argument("--seed-kappa", type=kappa_option, default=(5.0, 5.0),
                     help="arm-loop: starting (kappa_theta, kappa_psi) N m/rad (default 5,5)")
    cal.add_argument("--estimate-offsets", action="store_true",
                     help="arm-loop homotopy/lsq: estimate the joint-angle sensor offsets too")
    cal.add_argument("--samples", type=count(1), default=3000, help="kept draws per chain")
    cal.add_argument("--burn-in", type=count(0), default=1000, help="steps discarded per chain")
    cal.add_argument("--chains", type=count(1), default=2, help="Metropolis-Hastings chains")
    cal.add_argument("--proposal-scale", type=float, default=0.05,
                     help="random-walk step in units of each parameter's range (default 0.05)")
    cal.add_argument("--no-adapt", action="store_true",
                     help="keep the proposal fixed during burn-in too (the paper's setting)")
    cal.add_argument("--bounds", help="name=LOW:HIGH,... search bounds, in each parameter's "
                     "unit (default: each parameter's valid range)")
    cal.add_argument("--prior", help="name=uniform|loguniform|normal:MEAN:STD,... "
                     "(default: uniform within the bounds)")
    cal.add_argument("--noise", type=float, help="observation noise (m; m/s for impacts); "
                     "default estimated")
    cal.add_argument("--substeps", type=count(1), help="substeps per sample (default: scene's)")
    cal.add_argument("--initial-draws", type=count(0), help="initial states per fitted start,"
                     " drawn from its fit's uncertainty (default 4, 0 with --covariance bootstrap)")
    cal.add_argument("--recorded-start", choices=("fit", "recorded"),
                     help="recordings with recorded velocities: fit the first pose to the "
                     "free flight (fit), or roll out from it as recorded (default: fit for lsq "
                     "and the default MH, else recorded; train/README.md section 22)")
    cal.add_argument("--weighting", choices=("recording", "calibrated", "effective"),
                     help="mh only: the likelihood it samples on trajectories, noise estimated "
                     "(default calibrated: tied to its envelope, whose covariance is the "
                     "wider of a parametric bootstrap's and the sandwich's, --covariance; passed "
                     "simulation-based calibration on 6 and 20 tosses, train/README.md 20.5; "
                     "recording with --delayed-acceptance); recording: the raw one, each "
                     "recording one observation, too wide on few tosses, too narrow on many, "
                     "for comparison; effective: too narrow")
    cal.add_argument("--rugged-weight", type=float, metavar="LAMBDA",
                     help="mh, --weighting calibrated only: share of the likelihood's "
                     "departure from its envelope kept, 0 to 1 (default 0, the envelope alone, "
                     "with the bootstrap's covariance; 0.2 with the sandwich's; 1: Chandler-Bate)")
    add_envelope_options(cal)
    cal.add_argument("--delayed-acceptance", type=float, metavar="FRACTION", help="MH: screen "
                     "each proposal on this share of the recordings first (default: off)")
    cal.add_argument("--rotation-weight", type=float, default=1.0, metavar="W", help="weight "
                     "of the squared rotation angle (x r_g^2) against position (default 1)")
    cal.add_argument("--split", choices=("train", "all"), default="train", help="recordings "
                     "to fit (default train; all: no guard unless --max-trajectories leaves some)")
    cal.add_argument("--max-trajectories", type=count(1),
                     help="fit the first N of the split (default: all), hold out the rest")
    cal.add_argument("--budget", type=count(1), help="nevergrad, lsq, or mh's and sandwich's "
                     "lsq pilot: parameter sets, each rolled out on every recording (default "
                     "200; 600 with body or joint names: body on free flight (BUDGET), contact "
                     "(at most 12 (k + 1)), the body's weak directions through the first impact)")
    cal.add_argument("--optimizer", help="nevergrad only: its optimizer (default CMA)")
    cal.add_argument("--checkpoint-every", type=count(1), help="mh, nevergrad only: MH steps "
                     "(default 50) or evaluations (default: each batch) between checkpoints")
    cal.add_argument("--no-ground", action="store_true", help="do not set table_height_m from "
                     "the rest phases after a search (set when >= 5 recordings rest)")
    cal.add_argument("--keep-calibrated", action="store_true", help="export the calibrated "
                     "values even when another set predicts validation better")
    cal.add_argument("--guard-against", metavar="DIR", help="a contact-only calibration of "
                     "this scene (calibrate --params contact) the held-out guard also scores, "
                     "with the URDF's body: a body is kept only where it beats it (default: "
                     "none, and the summary says that fit was not compared)")
    cal.add_argument("--resume", action="store_true", help="continue the run in --out (named "
                     "on standard error; needed to run again into a folder holding this run)")
    add_seed(cal)
    cal.add_argument("--no-plots", action="store_true", help="skip corner.png, trace.png")
    cal.add_argument("--quiet", action="store_true", help="no progress bar, no notes")
    add_split_options(cal)
    add_allow_implausible(cal)
    add_workers(cal)
