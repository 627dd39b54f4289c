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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.errors import SolverError

__all__ = ["Program", "RelaxationResult", "SolveRecord", "DEFAULT_TAUS", "OK_STATUSES"]

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
    for ``0 <= a ⊥ b >= 0``, :meth:`minimize` to add to the objective, then :meth:`solve`.
    """

    _blocks: list[tuple[str, Any, tuple[int, ...]]] = field(default_factory=list)
    _x0: list[np.ndarray] = field(default_factory=list)
    _lbx: list[np.ndarray] = field(default_factory=list)
    _ubx: list[np.ndarray] = field(default_factory=list)
    _g: list[Any] = field(default_factory=list)
    _lbg: list[np.ndarray] = field(default_factory=list)
    _ubg: list[np.ndarray] = field(default_factory=list)
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

    def solve(self, taus: Sequence[float] = DEFAULT_TAUS, *, max_iter: int = 3000,
              tol: float = 1e-10, print_level: int = 0,
              hold: Sequence[str] = ()) -> RelaxationResult:
        """Solve the Scholtes relaxation for each τ in turn, warm started; see the module.

        ``hold`` names variable blocks kept at their initial guess in every solve but the
        last (their bounds collapse to it), then released within their bounds: a loose
        relaxation then cannot drive a parameter into a bound the complementarity would not
        allow (the cube's restitution, :mod:`~residualsim.sysid.mpec.cube`).
        """
        import casadi as ca

        if not taus or any(not (t > 0) for t in taus):
            raise ValueError(f"taus must be positive numbers, got {list(taus)}")
        unknown = sorted(set(hold) - {name for name, _, _ in self._blocks})
        if unknown:
            raise ValueError(f"hold names unknown variable blocks: {unknown}")
        x = ca.vertcat(*[block for _, block, _ in self._blocks])
        a, b = ca.vertcat(*self._a), ca.vertcat(*self._b)
        tau = ca.SX.sym("tau")
        n_pairs = len(self._a)
        g = ca.vertcat(*self._g, a, b, a * b - tau) if n_pairs else ca.vertcat(*self._g)
        lbg = np.concatenate(self._lbg + [np.zeros(2 * n_pairs), np.full(n_pairs, -np.inf)])
        ubg = np.concatenate(self._ubg + [np.full(2 * n_pairs, np.inf), np.zeros(n_pairs)])
        nlp = {"x": x, "p": tau, "f": self._f, "g": g}
        base = {"print_time": False, "ipopt.print_level": print_level, "ipopt.tol": tol,
                "ipopt.max_iter": max_iter, "ipopt.sb": "yes",
                "ipopt.acceptable_tol": 1e-7}
        cold = ca.nlpsol("mpec_cold", "ipopt", nlp, base)
        warm = ca.nlpsol("mpec_warm", "ipopt", nlp, {
            **base, "ipopt.warm_start_init_point": "yes", "ipopt.mu_init": 1e-6,
            "ipopt.warm_start_bound_push": 1e-9, "ipopt.warm_start_mult_bound_push": 1e-9,
            "ipopt.warm_start_slack_bound_push": 1e-9})
        pairs = ca.Function("pairs", [x], [a, b])
        x0, lbx, ubx = (np.concatenate(v) for v in (self._x0, self._lbx, self._ubx))
        held_lbx, held_ubx = lbx.copy(), ubx.copy()
        start = 0
        for (name, _, shape), init in zip(self._blocks, self._x0):
            size = int(np.prod(shape))
            if name in hold:
                held_lbx[start:start + size] = held_ubx[start:start + size] = init
            start += size
        args = {"x0": x0, "lbg": lbg, "ubg": ubg}
        records: list[SolveRecord] = []
        solution = None
        for index, value in enumerate(taus):
            last = index == len(taus) - 1
            args.update(lbx=lbx if last else held_lbx, ubx=ubx if last else held_ubx)
            # warm start from the previous solve; if that fails, one cold retry from the
            # previous primal point (both recorded)
            for solver in ((cold,) if index == 0 else (warm, cold)):
                started = time.perf_counter()
                candidate = solver(**args, p=float(value))
                seconds = time.perf_counter() - started
                stats = solver.stats()
                status = str(stats.get("return_status", "unknown"))
                a_value, b_value = (np.asarray(v).reshape(-1) for v in pairs(candidate["x"]))
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
        for name, block, shape in self._blocks:
            size = int(np.prod(shape))
            values[name] = flat[start:start + size].reshape(shape)
            start += size
        return RelaxationResult(values=values, solves=records, objective=float(solution["f"]))
