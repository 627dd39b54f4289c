"""The generic solver: a mathematical program with complementarity constraints (MPEC) by a
Scholtes relaxation driven to zero, with CasADi and IPOPT.

An MPEC here is

    min_x  f(x)   s.t.  g_lo <= g(x) <= g_hi,  x_lo <= x <= x_hi,
                         0 <= a_i(x)  ⊥  b_i(x) >= 0   for every pair i,

where ``a ⊥ b`` means a_i b_i = 0. The complementarity constraints violate the usual
constraint qualifications, so the NLP solver sees the Scholtes relaxation instead
(Scholtes 2001):

    a_i(x) >= 0,  b_i(x) >= 0,  a_i(x) b_i(x) <= τ,

solved for a decreasing sequence of τ (default 1e-1, 1e-2, ..., 1e-8), each solve warm
started from the previous one's primal and dual solution (IPOPT's
``warm_start_init_point``). τ is a parameter of one compiled NLP, so the problem is built
once. After the last solve the result reports the **complementarity violation** as
``max_i min(a_i, b_i)`` (the natural residual, in the units of the pair; 0 means every pair
is exactly complementary) and, beside it, ``max_i a_i b_i`` (what the relaxation bounds).

Every solve's IPOPT return status, iteration count and wall time are kept. A status other
than ``Solve_Succeeded`` / ``Solved_To_Acceptable_Level`` raises
:class:`~residualsim.errors.SolverError` naming it: a failed solve never becomes a number.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.errors import SolverError

__all__ = ["Program", "CompiledProgram", "RelaxationResult", "SolveRecord", "DEFAULT_TAUS", "OK_STATUSES"]

#: The relaxation schedule: τ bounds every product a_i b_i in turn.
DEFAULT_TAUS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
#: IPOPT return statuses accepted as a solution.
OK_STATUSES = ("Solve_Succeeded", "Solved_To_Acceptable_Level")


@dataclass(frozen=True)
class SolveRecord:
    """One IPOPT solve of the relaxation: τ, status, iterations, wall time (s), violations."""

    tau: float
    status: str
    iterations: int
    seconds: float
    violation_min: float
    violation_product: float
    objective: float

    def as_json(self) -> dict[str, Any]:
        return {"tau": self.tau, "status": self.status, "iterations": self.iterations,
                "seconds": self.seconds, "violation_min": self.violation_min,
                "violation_product": self.violation_product, "objective": self.objective}


@dataclass
class RelaxationResult:
    """Values of the named variables at the last solve, and the record of every solve."""

    values: dict[str, np.ndarray]
    solves: list[SolveRecord]
    objective: float

    @property
    def complementarity_violation(self) -> float:
        """max over pairs of min(a_i, b_i) after the last solve."""
        return self.solves[-1].violation_min

    @property
    def status(self) -> str:
        """IPOPT's return status of the last solve."""
        return self.solves[-1].status

    @property
    def iterations(self) -> int:
        """IPOPT iterations summed over the solves."""
        return int(sum(s.iterations for s in self.solves))

    @property
    def seconds(self) -> float:
        """Wall time summed over the solves (s)."""
        return float(sum(s.seconds for s in self.solves))

    def report(self) -> dict[str, Any]:
        """JSON-ready: final violations, status, totals and the per-solve records."""
        return {"complementarity_violation": self.complementarity_violation,
                "violation_measure": "max over pairs of min(a, b)",
                "complementarity_product_max": self.solves[-1].violation_product,
                "solver_status": self.status, "iterations": self.iterations,
                "solver_seconds": self.seconds, "objective": self.objective,
                "solves": [s.as_json() for s in self.solves]}


@dataclass
class Program:
    """Builder of an MPEC: variables, constraints, complementarity pairs, objective.

    Use :meth:`var` for each block of decision variables (bounds and initial guess),
    :meth:`constrain` for ``lo <= expr <= hi`` (equalities: ``lo == hi``), :meth:`complement`
    for ``0 <= a ⊥ b >= 0``, :meth:`minimize` to add to the objective, then :meth:`solve`
    (or :meth:`param` for data blocks, :meth:`compile` once, then solve it per data set).
    """

    _blocks: list[tuple[str, Any, tuple[int, ...]]] = field(default_factory=list)
    _x0: list[np.ndarray] = field(default_factory=list)
    _lbx: list[np.ndarray] = field(default_factory=list)
    _ubx: list[np.ndarray] = field(default_factory=list)
    _g: list[Any] = field(default_factory=list)
    _lbg: list[np.ndarray] = field(default_factory=list)
    _ubg: list[np.ndarray] = field(default_factory=list)
    _params: list[tuple[str, Any, tuple[int, ...]]] = field(default_factory=list)
    _a: list[Any] = field(default_factory=list)
    _b: list[Any] = field(default_factory=list)
    _f: Any = 0

    def var(self, name: str, shape: int | tuple[int, ...], lb: Any = -np.inf,
            ub: Any = np.inf, init: Any = 0.0) -> np.ndarray:
        """A block of variables as an object ndarray of CasADi SX scalars of ``shape``."""
        import casadi as ca

        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        size = int(np.prod(shape))
        symbols = ca.SX.sym(name, size)
        self._blocks.append((name, symbols, shape))
        for store, value in ((self._lbx, lb), (self._ubx, ub), (self._x0, init)):
            store.append(np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
                         .reshape(-1).copy())
        return np.array([symbols[i] for i in range(size)], dtype=object).reshape(shape)

    def constrain(self, expr: Any, lo: Any = 0.0, hi: Any = 0.0) -> None:
        """``lo <= expr <= hi`` elementwise (``expr`` a scalar or array of SX)."""
        import casadi as ca

        items = list(np.asarray(expr, dtype=object).reshape(-1))
        if not items:
            return
        self._g.append(ca.vertcat(*items))
        for store, value in ((self._lbg, lo), (self._ubg, hi)):
            store.append(np.broadcast_to(np.asarray(value, dtype=np.float64), (len(items),))
                         .copy())

    def complement(self, a: Any, b: Any) -> None:
        """``0 <= a ⊥ b >= 0`` elementwise (arrays of SX of one shape)."""
        a_items = list(np.asarray(a, dtype=object).reshape(-1))
        b_items = list(np.asarray(b, dtype=object).reshape(-1))
        if len(a_items) != len(b_items):
            raise ValueError(f"complementarity pair sizes differ: {len(a_items)} vs "
                             f"{len(b_items)}")
        self._a += a_items
        self._b += b_items

    def minimize(self, expr: Any) -> None:
        """Add ``expr`` (a scalar SX) to the objective."""
        self._f = self._f + expr

    @property
    def n_pairs(self) -> int:
        """Number of complementarity pairs."""
        return len(self._a)

    def param(self, name: str, shape: int | tuple[int, ...]) -> np.ndarray:
        """A block of NLP parameters (data, not decision variables) as an object ndarray of
        SX scalars; their values are given to :meth:`CompiledProgram.solve`, so one compiled
        program serves every data set of the same structure."""
        import casadi as ca

        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        size = int(np.prod(shape))
        symbols = ca.SX.sym(name, size)
        self._params.append((name, symbols, shape))
        return np.array([symbols[i] for i in range(size)], dtype=object).reshape(shape)

    def compile(self, *, max_iter: int = 3000, tol: float = 1e-10,
                print_level: int = 0, stage_tol: float | None = None) -> CompiledProgram:
        """Build the relaxation's IPOPT solvers once (see :class:`CompiledProgram`)."""
        return CompiledProgram(self, max_iter=max_iter, tol=tol, print_level=print_level,
                               stage_tol=stage_tol)

    def solve(self, taus: Sequence[float] = DEFAULT_TAUS, *, max_iter: int = 3000,
              tol: float = 1e-10, print_level: int = 0,
              hold: Sequence[str] = ()) -> RelaxationResult:
        """Solve the Scholtes relaxation for each τ in turn, warm started; see the module and
        :meth:`CompiledProgram.solve` (``hold``). A program with parameters is solved through
        :meth:`compile`."""
        if self._params:
            raise ValueError("a program with parameters is solved by compile().solve(params=)")
        return self.compile(max_iter=max_iter, tol=tol, print_level=print_level).solve(
            taus, hold=hold)


class CompiledProgram:
    """A :class:`Program`'s relaxation with its IPOPT solvers (cold and warm start, each
    built on first use and kept): building costs about as much as a small solve, so a
    compiled program is reused for every data set of one structure, the data given as
    parameters.

    ``tol`` is IPOPT's tolerance on the last solve of a schedule; ``stage_tol`` (default:
    ``tol``) on the solves before it, whose solutions only warm start the next one (the
    cube's windows: 1e-6 on the first of two solves cut IPOPT's iterations by 11 % but moved
    the estimates, so they keep ``tol``).
    """

    def __init__(self, program: Program, *, max_iter: int = 3000, tol: float = 1e-10,
                 print_level: int = 0, stage_tol: float | None = None) -> None:
        import casadi as ca

        self.blocks = [(name, shape) for name, _, shape in program._blocks]
        self.param_blocks = [(name, shape) for name, _, shape in program._params]
        self.n_pairs = len(program._a)
        x = ca.vertcat(*[block for _, block, _ in program._blocks])
        a, b = ca.vertcat(*program._a), ca.vertcat(*program._b)
        tau = ca.SX.sym("tau")
        p = ca.vertcat(tau, *[block for _, block, _ in program._params])
        n_pairs = self.n_pairs
        g = (ca.vertcat(*program._g, a, b, a * b - tau) if n_pairs
             else ca.vertcat(*program._g))
        self.lbg = np.concatenate(program._lbg + [np.zeros(2 * n_pairs),
                                                  np.full(n_pairs, -np.inf)])
        self.ubg = np.concatenate(program._ubg + [np.full(2 * n_pairs, np.inf),
                                                  np.zeros(n_pairs)])
        self._nlp = {"x": x, "p": p, "f": program._f, "g": g}
        self._base = {"print_time": False, "ipopt.print_level": print_level,
                      "ipopt.max_iter": max_iter, "ipopt.sb": "yes",
                      "ipopt.acceptable_tol": 1e-7}
        self.tol = float(tol)
        self.stage_tol = self.tol if stage_tol is None else float(stage_tol)
        self._solvers: dict[tuple[bool, float], Any] = {}
        self.pairs = ca.Function("pairs", [x, p], [a, b])
        self.x0 = [v.copy() for v in program._x0]
        self.lbx = [v.copy() for v in program._lbx]
        self.ubx = [v.copy() for v in program._ubx]

    def solver(self, warm: bool, tol: float) -> Any:
        """The IPOPT solver (cold or warm started) at tolerance ``tol``, built on first use."""
        import casadi as ca

        key = (bool(warm), float(tol))
        if key not in self._solvers:
            options = {**self._base, "ipopt.tol": float(tol)}
            if warm:
                options.update({
                    "ipopt.warm_start_init_point": "yes", "ipopt.mu_init": 1e-6,
                    "ipopt.warm_start_bound_push": 1e-9,
                    "ipopt.warm_start_mult_bound_push": 1e-9,
                    "ipopt.warm_start_slack_bound_push": 1e-9})
            self._solvers[key] = ca.nlpsol(f"mpec_{'warm' if warm else 'cold'}", "ipopt",
                                           self._nlp, options)
        return self._solvers[key]

    def _flat(self, defaults: list[np.ndarray], given: Mapping[str, Any] | None) -> np.ndarray:
        given = dict(given or {})
        unknown = sorted(set(given) - {name for name, _ in self.blocks})
        if unknown:
            raise ValueError(f"unknown variable blocks: {unknown}")
        return np.concatenate([
            np.broadcast_to(np.asarray(given[name], dtype=np.float64), shape).reshape(-1)
            if name in given else default
            for (name, shape), default in zip(self.blocks, defaults)])

    def solve(self, taus: Sequence[float] = DEFAULT_TAUS, *,
              params: Mapping[str, Any] | None = None, init: Mapping[str, Any] | None = None,
              lower: Mapping[str, Any] | None = None, upper: Mapping[str, Any] | None = None,
              hold: Sequence[str] = ()) -> RelaxationResult:
        """Solve the relaxation for each τ in turn, warm started.

        ``params`` gives every parameter block's values; ``init``, ``lower``, ``upper``
        replace the initial guess and bounds of the named variable blocks. ``hold`` names
        variable blocks kept at their initial guess in every solve but the last (their bounds
        collapse to it), then released within their bounds: a loose relaxation then cannot
        drive a parameter into a bound the complementarity would not allow (the cube's
        restitution, :mod:`~residualsim.sysid.mpec.cube`).
        """
        if not taus or any(not (t > 0) for t in taus):
            raise ValueError(f"taus must be positive numbers, got {list(taus)}")
        names = [name for name, _ in self.blocks]
        unknown = sorted(set(hold) - set(names))
        if unknown:
            raise ValueError(f"hold names unknown variable blocks: {unknown}")
        params = dict(params or {})
        missing = sorted({name for name, _ in self.param_blocks} - set(params))
        extra = sorted(set(params) - {name for name, _ in self.param_blocks})
        if missing or extra:
            raise ValueError(f"parameter values missing for {missing}, unknown: {extra}")
        p_data = [np.broadcast_to(np.asarray(params[name], dtype=np.float64), shape).reshape(-1)
                  for name, shape in self.param_blocks]
        x0 = self._flat(self.x0, init)
        lbx, ubx = self._flat(self.lbx, lower), self._flat(self.ubx, upper)
        held_lbx, held_ubx = lbx.copy(), ubx.copy()
        start = 0
        for name, shape in self.blocks:
            size = int(np.prod(shape))
            if name in hold:
                held_lbx[start:start + size] = held_ubx[start:start + size] = \
                    x0[start:start + size]
            start += size
        args = {"x0": x0, "lbg": self.lbg, "ubg": self.ubg}
        records: list[SolveRecord] = []
        solution = None
        for index, value in enumerate(taus):
            last = index == len(taus) - 1
            args.update(lbx=lbx if last else held_lbx, ubx=ubx if last else held_ubx)
            p = np.concatenate([[float(value)], *p_data])
            # warm start from the previous solve; if that fails, one cold retry from the
            # previous primal point (both recorded)
            tol = self.tol if last else self.stage_tol
            for warm in ((False,) if index == 0 else (True, False)):
                solver = self.solver(warm, tol)  # the cold retry is built only if needed
                started = time.perf_counter()
                candidate = solver(**args, p=p)
                seconds = time.perf_counter() - started
                stats = solver.stats()
                status = str(stats.get("return_status", "unknown"))
                a_value, b_value = (np.asarray(v).reshape(-1)
                                    for v in self.pairs(candidate["x"], p))
                records.append(SolveRecord(
                    tau=float(value), status=status,
                    iterations=int(stats.get("iter_count", -1)), seconds=seconds,
                    violation_min=float(np.max(np.minimum(a_value, b_value), initial=0.0)),
                    violation_product=float(np.max(a_value * b_value, initial=0.0)),
                    objective=float(candidate["f"])))
                if status in OK_STATUSES:
                    break
            solution = candidate
            if status not in OK_STATUSES:
                raise SolverError(f"IPOPT failed on the MPEC relaxation at tau={value:g}: "
                                  f"status {status} after {records[-1].iterations} "
                                  f"iterations", status=status, solves=records)
            args.update(x0=solution["x"], lam_x0=solution["lam_x"], lam_g0=solution["lam_g"])
        flat = np.asarray(solution["x"]).reshape(-1)
        values, start = {}, 0
        for name, shape in self.blocks:
            size = int(np.prod(shape))
            values[name] = flat[start:start + size].reshape(shape)
            start += size
        return RelaxationResult(values=values, solves=records, objective=float(solution["f"]))
