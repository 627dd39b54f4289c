"""Fuzzing the command line with hypothesis (issue 27): malformed recordings in every format
and odd argument combinations.

For each generated case the command must either succeed (exit 0, the output written) or
exit 2 with exactly one ``residualsim: error: ...`` line (argparse usage errors: its own
``... error: ...`` line after the usage), never let an exception escape ``main`` (a
traceback), and leave nothing at the output path. Log lines (WARNING/INFO) may precede the
error line. Derandomized, so CI sees the same cases every run; ``CASES`` counts them and
the module prints the counts at the end (``pytest -s``).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residualsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "samples" / "cube-synthetic"
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
#: Generated cases per test, printed at the end of the module.
CASES: collections.Counter = collections.Counter()
#: (test, exit code) counts.
OUTCOMES: collections.Counter = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print("\nfuzz cases generated: " + ", ".join(f"{k} {v}" for k, v in sorted(CASES.items()))
          + f" (total {sum(CASES.values())}); exit codes: "
          + ", ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(OUTCOMES.items())))


def _run(argv: list) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _check(argv: list, output: Path, name: str) -> int:
    """Run ``argv``; assert the contract of the module docstring; return the exit code."""
    CASES[name] += 1
    code, _, err = _run(argv)
    OUTCOMES[name, code] += 1
    assert "Traceback" not in err, err
    if code == 0:
        assert output.exists(), f"{argv}: exit 0 but {output} was not written"
        return code
    assert code == 2, f"{argv}: exit {code}\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, err
    usage = errors[0].startswith("residualsim ") or lines[0].startswith("usage:")
    assert usage or errors[0].startswith("residualsim: error: "), err
    others = [line for line in lines if line not in errors and not line.startswith(
        ("WARNING ", "INFO ", "usage:", " "))]
    assert not others, err
    assert not output.exists(), f"{argv}: exit 2 but {output} was written"
    return code


# --- recordings -------------------------------------------------------------------------------
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                    st.sampled_from([0.0, 1.0, -1.0, 1e30, -1e30, 0.5]))


@st.composite
def arrays(draw, max_rows: int = 12, columns=None) -> np.ndarray:
    rows = draw(st.integers(0, max_rows))
    cols = columns if columns is not None else draw(st.integers(0, 24))
    fill = draw(st.sampled_from(["random", "finite", "constant"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if fill == "random":
        values = rng.normal(scale=draw(st.sampled_from([1.0, 1e3, 1e30])), size=(rows, cols))
        if rows and cols and draw(st.booleans()):
            values[rng.integers(rows), rng.integers(cols)] = draw(numbers)
        return values
    if fill == "finite":
        return rng.uniform(-1, 1, size=(rows, cols))
    return np.full((rows, cols), draw(numbers))


MUTATIONS = ("none", "cell", "truncate", "drop_column", "row_jump")


def _mutate(data, values: np.ndarray) -> np.ndarray:
    """A valid (T, C) table with one drawn mutation (or none)."""
    values = np.array(values, dtype=float)
    kind = data.draw(st.sampled_from(MUTATIONS))
    if kind == "cell":
        row = data.draw(st.integers(0, len(values) - 1))
        column = data.draw(st.integers(0, values.shape[1] - 1))
        values[row, column] = data.draw(numbers)
    elif kind == "truncate":
        values = values[:data.draw(st.integers(0, 3))]
    elif kind == "drop_column":
        values = np.delete(values, data.draw(st.integers(0, values.shape[1] - 1)), axis=1)
    elif kind == "row_jump":
        values[data.draw(st.integers(1, len(values) - 1)):, :3] += data.draw(
            st.sampled_from([0.01, 0.5, 1e30]))
    return values


@given(data=st.data())
@FUZZ
def test_fuzz_contactnets_pt(tmp_path_factory, data):
    import torch

    root = tmp_path_factory.mktemp("pt")
    (root / "tosses").mkdir()
    kind = data.draw(st.sampled_from(["mutated", "mutated", "tensor", "tensor3", "dict",
                                      "list", "bytes", "empty"]))
    path = root / "tosses" / "0.pt"
    if kind == "mutated":
        base = torch.load(BUNDLED / "tosses" / "synthetic-0.pt").numpy()[0]
        torch.save(torch.tensor(_mutate(data, base))[None], path)
    elif kind in ("tensor", "tensor3"):
        values = data.draw(arrays(max_rows=20, columns=data.draw(st.sampled_from(
            [15, 18, 19, 20, None]))))
        tensor = torch.tensor(values)
        torch.save(tensor[None] if kind == "tensor3" else tensor, path)
    elif kind == "dict":
        torch.save({"data": torch.zeros(1, 3, 19)}, path)
    elif kind == "list":
        torch.save([1, 2, 3], path)
    elif kind == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=64)))
    else:
        path.write_bytes(b"")
    out = root / "out" / "pred.npz"
    _check(["simulate", "--data", root, "--out", out], out, "contactnets .pt")


NPZ_KEYS = ("times_s", "positions_m", "quat_wxyz", "linear_velocity_mps",
            "angular_velocity_world_radps", "joint_names", "joint_positions",
            "joint_velocities")


@given(data=st.data())
@FUZZ
def test_fuzz_npz(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("npz")
    if data.draw(st.booleans()):  # a valid file with one array mutated
        from residualsim.data import load_trajectories
        from residualsim.data.npz import save_trajectories

        toss = next(iter(load_trajectories(BUNDLED).values()))
        save_trajectories(root, {"0": toss})
        with np.load(root / "0.npz") as saved:
            content = dict(saved)
        key = data.draw(st.sampled_from(sorted(content)))
        if key == "meta" or content[key].ndim < 2:
            del content[key]
        else:
            content[key] = _mutate(data, content[key])
        np.savez(root / "0.npz", **content)
        out = root / "out" / "pred.npz"
        _check(["simulate", "--data", root, "--out", out], out, "npz")
        return
    keys = data.draw(st.lists(st.sampled_from(NPZ_KEYS + ("junk",)), max_size=8, unique=True))
    rows = data.draw(st.integers(0, 10))
    arrays_ = {}
    for key in keys:
        width = {"times_s": None, "quat_wxyz": 4, "joint_names": None}.get(key, 3)
        if data.draw(st.booleans()):
            width = data.draw(st.integers(0, 5))
        values = data.draw(arrays(max_rows=rows, columns=width or 1))
        arrays_[key] = values[:, 0] if width is None else values
    meta = data.draw(st.sampled_from([
        None, "not json", json.dumps({"format": "residualsim.trajectory", "format_version": 1,
                                      "planar": False, "source": "", "metadata": {}}),
        json.dumps({"format": "residualsim.trajectory", "format_version": 7}),
        json.dumps([1, 2])]))
    if meta is not None:
        arrays_["meta"] = np.array(meta)
    np.savez(root / "0.npz", **arrays_)
    out = root / "out" / "pred.npz"
    _check(["simulate", "--data", root, "--out", out], out, "npz")


CSV_COLUMNS = ("t", "x", "y", "z", "qw", "qx", "qy", "qz", "theta", "vx", "vy", "vz", "wx",
               "wy", "wz", "omega", "hinge", "hinge_vel")
cells = st.one_of(st.sampled_from(["", "nan", "inf", "-inf", "1e400", "abc", "0x10", " ",
                                   "1,2", '"3"']),
                  st.floats(allow_nan=False, allow_infinity=False).map(repr),
                  st.integers(-5, 5).map(str))


@given(data=st.data())
@FUZZ
def test_fuzz_csv(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("csv")
    if data.draw(st.booleans()):  # a valid poses-only file with one cell or header changed
        from residualsim.data import load_trajectories
        from residualsim.data.csv import save_csv_trajectory

        toss = next(iter(load_trajectories(BUNDLED).values()))
        save_csv_trajectory(root / "0.csv", toss, with_velocities=data.draw(st.booleans()))
        lines = (root / "0.csv").read_text().splitlines()
        row = data.draw(st.integers(0, min(len(lines) - 1, 12)))
        fields = lines[row].split(",")
        column = data.draw(st.integers(0, len(fields) - 1))
        fields[column] = data.draw(st.one_of(
            cells, st.sampled_from(CSV_COLUMNS),
            st.floats(-2, 2).map(lambda v: repr(float(fields[column]) + v) if row else "t")))
        lines[row] = ",".join(fields)
        (root / "0.csv").write_text("\n".join(lines) + "\n")
        out = root / "out" / "pred.npz"
        _check(["simulate", "--data", root, "--out", out], out, "csv")
        return
    header = data.draw(st.lists(st.one_of(st.sampled_from(CSV_COLUMNS),
                                          st.text(min_size=0, max_size=6)),
                                min_size=0, max_size=12))
    rows = data.draw(st.lists(st.lists(cells, min_size=0, max_size=len(header) + 2),
                              max_size=8))
    text = "\n".join([",".join(h.replace("\n", " ").replace("\r", " ") for h in header)]
                     + [",".join(row) for row in rows])
    (root / "0.csv").write_text(text, encoding="utf-8")
    out = root / "out" / "pred.npz"
    _check(["simulate", "--data", root, "--out", out], out, "csv")


# --- arguments --------------------------------------------------------------------------------
texts = st.one_of(st.sampled_from(["", "0", "-1", "1e9", "nan", "inf", "abc", "1,2", "1e-300",
                                   "0.05", "3", "lateral_friction=0.3",
                                   "lateral_friction=0.3,lateral_friction=0.4",
                                   "restitution=true", "=", ",", "x=1"]),
                  st.text(alphabet="0123456789.,-=e_abcdefghijklmnopqrstuvwxyz", max_size=12))
SIMULATE_FLAGS = ("--params", "--substeps", "--split", "--limit", "--split-fractions",
                  "--workers", "--scene", "--task-timeout")
ROLLOUT_FLAGS = ("--horizon", "--samples", "--particles", "--events", "--seed")


@given(flags=st.dictionaries(st.sampled_from(SIMULATE_FLAGS), texts, max_size=3))
@FUZZ
def test_fuzz_simulate_arguments(tmp_path_factory, flags):
    root = tmp_path_factory.mktemp("args")
    out = root / "pred.npz"
    argv = ["simulate", "--data", BUNDLED, "--out", out, "--limit", "1"]
    for flag, value in flags.items():
        if flag == "--workers" and value not in ("1", "2"):
            value = "0" if value.startswith("-") else value  # no 1e9 processes
        argv += [flag, value] if not value.startswith("-") else [f"{flag}={value}"]
    _check(argv, out, "simulate arguments")


VALID_STATE = [0.0, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0, 5.0, 0.0]


@st.composite
def states(draw) -> list:
    if draw(st.booleans()):
        return draw(st.lists(numbers, min_size=12, max_size=14))
    state = list(VALID_STATE)
    for _ in range(draw(st.integers(0, 2))):
        state[draw(st.integers(0, 12))] = draw(st.one_of(
            numbers, st.floats(-2, 2, allow_nan=False)))
    return state


@given(flags=st.dictionaries(st.sampled_from(ROLLOUT_FLAGS), texts, max_size=3),
       state=states())
@FUZZ
def test_fuzz_rollout_arguments(tmp_path_factory, flags, state):
    root = tmp_path_factory.mktemp("rollout")
    out = root / "r.npz"
    argv = ["rollout", f"--state={','.join(repr(v) for v in state)}", "--out", out]
    sizes = {"--horizon": "0.05", "--samples": "2", "--particles": "0"}
    for flag, value in flags.items():
        try:  # keep runs that would succeed short: big but finite sizes only via the estimate
            number = float(value)
        except ValueError:
            number = None
        if number is not None and flag in sizes and 0 < number and (
                number * {"--horizon": 148, "--samples": 1, "--particles": 1}[flag] > 64
                and number < 1e6):
            value = sizes[flag]
        if flag == "--events" and number is not None and number > 3:
            value = "3"
        sizes[flag] = value
    for flag, value in sizes.items():
        argv.append(f"{flag}={value}")
    for flag in ("--events", "--seed"):
        if flag in flags:
            argv.append(f"{flag}={flags[flag] if flag != '--events' else sizes.get(flag)}")
    _check(argv, out, "rollout arguments")
