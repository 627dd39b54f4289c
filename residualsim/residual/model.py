"""A trained residual model: the policy with the (calibrated) engine it corrects, as a folder.

:class:`ResidualModel` is what every rollout takes: the policy
(:class:`~residualsim.residual.policy.ResidualPolicy`), the engine parameters, the settings
it was trained at, the contact guard and the fitted uncertainty (state noise, spread,
sustained-contact part, observation noise), and the scene, resolved once (``layout``).
A model directory holds ``model.json``, ``policy.json`` and ``policy.npz``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from residualsim.atomic import atomic_write_text, path_for_file, path_from_file, read_json
from residualsim.errors import DataError
from residualsim.residual.policy import ResidualPolicy
from residualsim.sim.contact import feature_width

__all__ = ["ResidualModel"]


_MODEL_FORMAT = "residualsim.model/1"


@dataclass
class ResidualModel:
    """Everything a rollout needs: the policy, the (calibrated) engine and its settings.

    A model directory holds ``model.json`` (format, scene, engine parameters, the identified
    body when the calibration had one (:mod:`residualsim.sim.scenes.body`), ``dt_s`` and
    ``substeps`` the policy was trained at, the contact guard, training provenance and
    figures), ``policy.json`` and ``policy.npz`` (see :class:`ResidualPolicy`).
    """

    scene: str
    policy: ResidualPolicy
    params: Any  # EngineParams
    dt_s: float
    substeps: int
    guard: Any  # rollout.ContactGuard
    info: dict[str, Any] = field(default_factory=dict)
    #: Factor on the mixture's scales when sampling: the policy is trained on its mean's
    #: error, which leaves its scales uncalibrated; :func:`residualsim.residual.spread.fit_spread`
    #: sets this from the training tosses' energy score. 1.0 for models without one.
    spread: float = 1.0
    #: Noise of a recording's initial velocities (:class:`~residualsim.residual.state_noise.StateNoise`),
    #: drawn for each stochastic sample before its rollout (its standard deviations times
    #: its ``factor``); None: samples start from the recorded state exactly. Set by
    #: ``train``'s uncertainty fit (estimate and factor) or ``fit-spread --state-noise``.
    state_noise: Any = None
    #: The residual through sustained contact
    #: (:class:`~residualsim.residual.coefficients.CoefficientResidual`): friction
    #: coefficients set at every step that ends in contact; None: events only.
    sustained: Any = None
    #: The recordings' pose noise (:class:`~residualsim.residual.observation_noise.ObservationNoise`),
    #: added to each stochastic sample's positions after its rollout; None: none (and
    #: ``model.json`` then has no entry, as before). Set by ``fit-ground`` or
    #: :func:`residualsim.residual.train.fit_ground`.
    observation_noise: Any = None
    #: The resolved scene (:class:`~residualsim.sim.scenes.Scene`), made once from
    #: :attr:`scene` (the name or file it is saved as) or given as :attr:`scene` itself:
    #: rollouts, features and settings take it from here, never by resolving the name again.
    layout: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        from residualsim.sim.scenes import Scene, make_scene, scene_reference

        if isinstance(self.scene, Scene):
            self.layout, self.scene = self.scene, scene_reference(self.scene)
        elif self.layout is None:
            self.layout = make_scene(self.scene)

    def sampling_policy(self):
        """The policy as rollouts use it: :class:`NumpyPolicy` with this model's spread,
        inside a :class:`~residualsim.residual.coefficients.SustainedPolicy` when the model
        has a sustained-contact part."""
        if self.sustained is not None:
            from residualsim.residual.coefficients import SustainedPolicy

            return SustainedPolicy(self.sustained, self.policy.numpy(self.spread))
        return self.policy.numpy(self.spread)

    def settings(self):
        """The engine settings the model runs at (the scene's, with its dt_s and substeps)."""
        import dataclasses

        return dataclasses.replace(self.layout.settings, dt_s=self.dt_s,
                                   substeps=self.substeps)

    def save(self, directory: str | Path) -> Path:
        """Write the model directory (each file atomically)."""
        import dataclasses

        from residualsim import __version__

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.policy.save(directory)
        header = {"format": _MODEL_FORMAT, "residualsim_version": __version__,
                  "scene": _scene_for_header(self.scene, directory),
                  "params": self.params.as_json(),
                  **({"body": self.params.body.as_json()}
                     if getattr(self.params, "body", None) is not None else {}),
                  "settings": {"dt_s": self.dt_s, "substeps": self.substeps},
                  "guard": dataclasses.asdict(self.guard), "spread": self.spread,
                  "state_noise": (None if self.state_noise is None
                                  else self.state_noise.as_json()),
                  **({"sustained": self.sustained.as_json()}
                     if self.sustained is not None else {}),
                  **({"observation_noise": self.observation_noise.as_json()}
                     if self.observation_noise is not None else {}),
                  "info": self.info}
        atomic_write_text(directory / "model.json", json.dumps(header, indent=2))
        return directory

    @classmethod
    def of(cls, model: str | Path | ResidualModel) -> ResidualModel:
        """``model`` itself when it is loaded already, else :meth:`load` of the directory: the
        library functions take either, so a pipeline loads (and resolves its scene) once."""
        return model if isinstance(model, cls) else cls.load(model)

    @classmethod
    def load(cls, directory: str | Path) -> ResidualModel:
        """Read a model directory; a clear DataError names what is missing or wrong."""
        from residualsim.sim.rollout import ContactGuard
        from residualsim.sim.scenes import make_scene, parse_params
        from residualsim.residual.state_noise import StateNoise

        directory = Path(directory)
        path = directory / "model.json"
        if not directory.is_dir():
            raise DataError(f"{directory}: model directory not found")
        header = read_json(path, missing=f"{directory}: no model.json (not a residualsim model)")
        if not isinstance(header, dict) or header.get("format") != _MODEL_FORMAT:
            raise DataError(f"{path}: not a residualsim model (expected format "
                            f"{_MODEL_FORMAT!r})")
        try:
            scene = _scene_from_header(str(header["scene"]), directory)
            layout = make_scene(scene)  # the model's one resolution of its scene
            params = parse_params({k: float(v) for k, v in dict(header["params"]).items()})
            if header.get("body") is not None:  # the identified body travels with the model
                from residualsim.sim.scenes.body import BodyParams
                from residualsim.sim.scenes.params import ObjectParams

                params = ObjectParams.of(params, BodyParams.from_json(header["body"],
                                                                      str(path)))
            dt_s = float(header["settings"]["dt_s"])
            substeps = header["settings"]["substeps"]
            if isinstance(substeps, bool) or not isinstance(substeps, int):
                raise ValueError(f"substeps {substeps!r} must be an integer")
            guard = ContactGuard(**dict(header.get("guard", {})))
            info = dict(header.get("info", {}))
            spread = float(header.get("spread", 1.0))
            noise = header.get("state_noise")
            state_noise = None if noise is None else StateNoise.from_json(noise)
            sustained = header.get("sustained")
            if sustained is not None:
                from residualsim.residual.coefficients import CoefficientResidual

                sustained = CoefficientResidual.from_json(sustained)
            observed = header.get("observation_noise")
            if observed is not None:
                from residualsim.residual.observation_noise import ObservationNoise

                observed = ObservationNoise.from_json(observed)
            if not (dt_s > 0 and substeps >= 1):
                raise ValueError(f"dt_s {dt_s} and substeps {substeps} must be positive")
            if not (math.isfinite(spread) and spread >= 0):
                raise ValueError(f"spread {spread} must be finite and >= 0")
        except (KeyError, TypeError, ValueError, AttributeError, DataError) as exc:
            raise DataError(f"{path}: malformed model description ({exc})") from None
        policy = ResidualPolicy.load(directory)
        planar = layout.planar
        if policy.n_features != feature_width(planar, policy.spin, policy.contact_mode):
            raise DataError(f"{directory}: a policy with {policy.n_features} features cannot "
                            f"run the {'planar' if planar else '3D'} scene {scene!r}")
        return cls(scene=scene, layout=layout, policy=policy, params=params, dt_s=dt_s,
                   substeps=substeps,
                   guard=guard, info=info, spread=spread, state_noise=state_noise,
                   sustained=sustained, observation_noise=observed)


def _scene_for_header(scene: str, directory: Path) -> str:
    """``model.json``'s scene: a built-in name as is, a scene file's path relative to the
    model directory (:func:`~residualsim.atomic.path_for_file`)."""
    from residualsim.sim.scenes import is_scene_path

    return path_for_file(scene, directory) if is_scene_path(scene) else scene


def _scene_from_header(scene: str, directory: Path) -> str:
    """``model.json``'s scene as a ``--scene`` value (:func:`~residualsim.atomic.path_from_file`)."""
    from residualsim.sim.scenes import is_scene_path

    if not is_scene_path(scene):
        return scene
    found = path_from_file(scene, directory)
    return scene if found == Path(scene) else str(found.resolve())
