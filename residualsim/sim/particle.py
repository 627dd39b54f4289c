"""One rollout's loop state, shared by the loops that run it outside the lone Python loop.

:class:`Particle` holds what :func:`~residualsim.sim.rollout.residual_rollout` keeps in local
variables (the sample index, the raw records read so far, the new-point memory, the deepest
penetration, the rest detector, the event counts), so that the batched loops
(:mod:`.batch`) and the compiled loops (:mod:`.batch_compiled`, :mod:`.lone_compiled`) can
hand a rollout between Python and the kernel. :func:`body_first` turns a world's contact
listing into the tuples ``getContactPoints(body, table)`` gives.
"""

from __future__ import annotations

__all__ = ["Particle", "body_first"]


class Particle:
    """One particle's loop state (the lone loop's locals) while it goes to its event (or
    its horizon); ``correct`` its event corrector in a whole rollout, else None.

    ``raws`` are :meth:`Scene.read_raw` records (world frame: position m, quaternion
    x-y-z-w, velocity m/s, angular velocity rad/s); ``recent`` the table points (m, world)
    touched in the last steps; ``body`` the PyBullet body it runs on."""

    __slots__ = ("number", "index", "raws", "recent", "deepest", "rest", "body", "reset",
                 "events", "event", "stepped", "start", "first_raw", "correct", "place")

    def __init__(self, number: int, raws: list, rest, correct) -> None:
        self.number, self.index, self.raws, self.rest = number, 0, raws, rest
        self.recent: list = []
        self.deepest, self.events, self.event, self.stepped = 0.0, 0, None, 0
        self.body, self.reset, self.start, self.first_raw = None, False, None, None
        self.correct, self.place = correct, None  # place: set_state's arguments at the reset


def body_first(points: list, flip: bool) -> list:
    """Contact tuples as ``getContactPoints(body, table)`` gives them (the body as A, the
    normal from the table into the body) from the world's listing, where the table may be A
    (``flip``)."""
    if not flip:
        return points
    return [(q[0], q[2], q[1], q[4], q[3], q[6], q[5], (-q[7][0], -q[7][1], -q[7][2]),
             *q[8:]) for q in points]
