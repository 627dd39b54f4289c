"""``data synthesize --session``: a synthetic capture session with known truth, written as a
lab's capture system would (a ROS 1 bag, a ROS 2 bag folder or one long CSV), so that
``data import`` can be tried, and checked, without a lab."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data.session_write import write_pose_bag, write_session_csv
from residualsim.errors import ParameterError
from residualsim.sim.sessions import corrupt_session, synthesize_session

__all__ = ["write_synthetic_session", "topic_of"]

#: Most throws of one synthetic session (each about 5 s of capture).
MAX_THROWS = 200


def topic_of(link: str) -> str:
    """The pose topic a synthetic session gives a link (a mocap driver's naming)."""
    return f"/mocap/{link}/pose"


def write_synthetic_session(out: str | os.PathLike[str], scene: str, *, throws: int = 6,
                            rate_hz: float = 150.0, noise_m: float = 3e-4,
                            noise_rad: float = 2e-3, jitter_s: float = 2e-4,
                            seed: int = 0, storage: str = "mcap",
                            start_s: float = 1.7e9) -> dict:
    """Simulate a session of ``throws`` throws between carries, placements and slides of the
    scene's object (:func:`residualsim.sim.sessions.synthesize_session`), add capture noise
    (positions ``noise_m`` m, orientations ``noise_rad`` rad, stamp jitter ``jitter_s`` s,
    1 % dropped messages) and write it to ``out``: ``.bag`` a ROS 1 bag, ``.csv`` one long
    CSV, else a ROS 2 bag folder of ``storage`` (``mcap`` or ``sqlite3``); each link's
    PoseStamped on :func:`topic_of`. The truth (each throw's release on the session's
    clock, the links' topics) goes to ``<out>.truth.json``. Returns that record."""
    if not 1 <= throws <= MAX_THROWS:
        raise ParameterError(f"--count {throws}: a synthetic session holds 1 to {MAX_THROWS} "
                             "throws")
    out = Path(out)
    session = synthesize_session(scene, rate_hz=rate_hz, n_throws=throws, seed=seed,
                                 start_s=start_s)
    csv = out.suffix.lower() == ".csv"
    streams = corrupt_session(session, noise_m=noise_m, noise_rad=noise_rad,
                              jitter_s=0.0 if csv else jitter_s,
                              dropout=0.0 if csv else 0.01, seed=seed)
    base = session.link_names[0]
    if csv:  # one row per capture frame: every link's pose in it
        first = streams[base]
        write_session_csv(out, first.stamps_s, first.positions_m, first.quat_wxyz,
                          links={link: (m.positions_m, m.quat_wxyz)
                                 for link, m in streams.items() if link != base})
    else:
        write_pose_bag(out, {topic_of(link): m for link, m in streams.items()},
                       storage="ros1" if out.suffix.lower() == ".bag" else storage)
    truth = {"command": "data synthesize --session", "scene": str(scene), "out": str(out),
             "rate_hz": rate_hz, "seed": seed, "noise_m": noise_m, "noise_rad": noise_rad,
             "links": {link: topic_of(link) for link in session.link_names},
             "throws": [{"release_s": float(t.release_time_s),
                         "first_sample_s": float(session.times_s[t.release_index])}
                        for t in session.throws],
             "duration_s": float(np.ptp(session.times_s))}
    atomic_write_text(out.with_name(out.name + ".truth.json"), json.dumps(truth, indent=1))
    return truth
