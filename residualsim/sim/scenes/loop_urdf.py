"""URDF of a flexible loop: n rigid links on two-axis torsional-spring joints, from parameters.

The loop (after Caldwell, Coleman and Correll's bicycle tyre) is a regular n-gon of radius
``radius_m`` standing in a vertical plane, clamped at its bottom vertex. The URDF is an open
chain that starts at the clamp (the fixed base) and goes once around; the scene closes it
back onto the clamp with a fixed constraint (URDF cannot express a closed chain).

Frames (at zero joint angles the chain is exactly the n-gon):

* the base frame is the clamp vertex, with the loop in the base's x-z plane, centre above;
* link k (k = 1..n) spans vertex k-1 to vertex k; its frame sits at vertex k-1 with **x along
  the link** (the tangent, going counter-clockwise seen from -y), **y normal to the loop
  plane** (world -y for an upright loop) and z = x × y;
* each vertex has two revolute joints: θ_k about the link's x axis (twist), then ψ_k about its
  y axis (in-plane bending), with a small "vertex" body between them (URDF needs a body
  between two joints; it gets ``vertex_mass_fraction`` of the link mass, so that no body has
  the near-zero inertia PyBullet explodes on).

A thin link's inertia about its own axis (m r² / 2 ≈ 2e-6 kg m² here) would make the twist
mode too fast for explicit spring torques at 1 ms steps (ω = sqrt(κ / I) ≈ 1500 rad/s for
κ = 4.45; explicit steps need ω dt < 2), so ``armature_kgm2`` is added about the twist axis of every link and vertex body,
as a motor's rotor inertia is in robot models: it slows only that high-frequency mode and
leaves the quasi-static response the identification sees unchanged.

PyBullet link indices: vertex body k is ``2k-2``, link k is ``2k-1``; joint θ_k is ``2k-2``
and ψ_k is ``2k-1``. Spring stiffnesses (N m/rad) and damping (N m s/rad) are written in a
``<residualsim_loop>`` element that PyBullet ignores and :func:`read_loop_parameters` reads;
the joints' URDF damping is 0 (the scene applies springs and damping itself).
Units: metres, kilograms, radians.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from residualsim.errors import SceneError

__all__ = ["LoopParameters", "loop_urdf", "read_loop_parameters", "loop_vertices"]


@dataclass(frozen=True)
class LoopParameters:
    """Geometry, mass and springs of a loop (defaults: the bicycle tyre of the paper).

    ``kappa_theta`` and ``kappa_psi`` (N m/rad) are the stiffnesses of every θ (twist) and
    every ψ (bending) joint of *this* discretisation; :meth:`rescaled` gives the springs of
    a finer or coarser chain of the same continuous ring.
    """

    n_links: int = 12
    radius_m: float = 0.355
    mass_kg: float = 0.132
    tube_radius_m: float = 0.02
    kappa_theta: float = 4.45252
    kappa_psi: float = 0.96969
    damping: float = 0.002
    vertex_mass_fraction: float = 0.1
    armature_kgm2: float = 5e-5

    def __post_init__(self) -> None:
        if int(self.n_links) != self.n_links or self.n_links < 3:
            raise SceneError(f"a loop needs an integer n_links >= 3, got {self.n_links}")
        for name in ("radius_m", "mass_kg", "tube_radius_m"):
            if not getattr(self, name) > 0:
                raise SceneError(f"loop {name} must be positive, got {getattr(self, name)}")
        for name in ("kappa_theta", "kappa_psi", "damping"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SceneError(f"loop {name} must be finite and >= 0, got {value}")
        if not (math.isfinite(self.armature_kgm2) and self.armature_kgm2 >= 0):
            raise SceneError(f"armature_kgm2 must be finite and >= 0, got {self.armature_kgm2}")
        if not 0 < self.vertex_mass_fraction < 1:
            raise SceneError("vertex_mass_fraction must be in (0, 1), got "
                             f"{self.vertex_mass_fraction}")

    @property
    def link_length_m(self) -> float:
        """Chord of one link, 2 R sin(pi / n), metres."""
        return 2.0 * self.radius_m * math.sin(math.pi / self.n_links)

    def rescaled(self, n_links: int) -> LoopParameters:
        """The same continuous ring on ``n_links`` links.

        A joint spring lumps the ring's bending (torsional) rigidity EI (GJ) over one link
        length: κ = EI / l, so κ scales with n, and so does the lumped damping.
        """
        scale = n_links / self.n_links
        values = asdict(self)
        values.update(n_links=n_links, kappa_theta=self.kappa_theta * scale,
                      kappa_psi=self.kappa_psi * scale, damping=self.damping * scale)
        return LoopParameters(**values)


def loop_vertices(params: LoopParameters) -> np.ndarray:
    """Vertices (n, 3) of the rest n-gon in the base frame, metres; vertex 0 is the clamp."""
    angles = -math.pi / 2 + 2 * math.pi * np.arange(params.n_links) / params.n_links
    return np.column_stack([params.radius_m * np.cos(angles), np.zeros(params.n_links),
                            params.radius_m * (np.sin(angles) + 1.0)])


def _inertial(mass: float, com: tuple[float, float, float], ixx: float, iyy: float,
              izz: float) -> str:
    return (f'<inertial><origin xyz="{com[0]!r} {com[1]!r} {com[2]!r}" rpy="0 0 0"/>'
            f'<mass value="{mass!r}"/><inertia ixx="{ixx!r}" ixy="0" ixz="0" iyy="{iyy!r}" '
            f'iyz="0" izz="{izz!r}"/></inertial>')


def loop_urdf(params: LoopParameters) -> str:
    """The URDF text of the loop described by ``params`` (see the module docstring)."""
    n, length = params.n_links, params.link_length_m
    bend = 2 * math.pi / n  # exterior angle: each link turns this far about its y axis
    link_mass = params.mass_kg / n * (1 - params.vertex_mass_fraction)
    vertex_mass = params.mass_kg / n * params.vertex_mass_fraction
    r = params.tube_radius_m
    # A solid cylinder along x for the link; a sphere of the tube radius for the vertex body.
    # ... plus the armature about the twist axis, keeping each tensor physical
    # (I_yy + I_zz >= I_xx, else PyBullet zeroes it).
    i_axis = 0.5 * link_mass * r * r + params.armature_kgm2
    i_cross = max(link_mass * (3 * r * r + length * length) / 12, i_axis / 2)
    i_vertex = 0.4 * vertex_mass * r * r
    i_vertex_axis = i_vertex + params.armature_kgm2
    i_vertex_cross = max(i_vertex, i_vertex_axis / 2)
    cylinder = (f'<origin xyz="{length / 2!r} 0 0" rpy="0 {math.pi / 2!r} 0"/>'
                f'<geometry><cylinder radius="{r!r}" length="{length!r}"/></geometry>')
    lines = [
        '<?xml version="1.0"?>',
        "<!-- Generated by residualsim.sim.scenes.loop_urdf from the parameters below; do not edit. -->",
        f'<robot name="loop{n}">',
        "  <residualsim_loop " + " ".join(f'{k}="{v!r}"' for k, v in asdict(params).items())
        + "/>",
        '  <link name="clamp">',
        "    " + _inertial(0.0, (0.0, 0.0, 0.0), 0.0, 0.0, 0.0),
        '    <visual><origin xyz="0 0 -0.015" rpy="0 0 0"/>'
        '<geometry><box size="0.06 0.06 0.03"/></geometry></visual>',
        "  </link>",
    ]
    for k in range(1, n + 1):
        parent = "clamp" if k == 1 else f"link{k - 1}"
        if k == 1:  # from the clamp frame (loop in x-z, centre above) to link 1's frame
            origin = f'xyz="0 0 0" rpy="{math.pi!r} {-(math.pi / n)!r} 0"'
        else:
            origin = f'xyz="{length!r} 0 0" rpy="0 {bend!r} 0"'
        lines += [
            f'  <joint name="theta{k}" type="continuous"><parent link="{parent}"/>'
            f'<child link="vertex{k}"/><origin {origin}/><axis xyz="1 0 0"/>'
            '<dynamics damping="0" friction="0"/></joint>',
            f'  <link name="vertex{k}">'
            + _inertial(vertex_mass, (0.0, 0.0, 0.0), i_vertex_axis, i_vertex_cross,
                        i_vertex_cross) + "</link>",
            f'  <joint name="psi{k}" type="continuous"><parent link="vertex{k}"/>'
            f'<child link="link{k}"/><origin xyz="0 0 0" rpy="0 0 0"/><axis xyz="0 1 0"/>'
            '<dynamics damping="0" friction="0"/></joint>',
            f'  <link name="link{k}">'
            + _inertial(link_mass, (length / 2, 0.0, 0.0), i_axis, i_cross, i_cross)
            + f"<visual>{cylinder}</visual><collision>{cylinder}</collision></link>",
        ]
    lines.append("</robot>")
    return "\n".join(lines) + "\n"


def read_loop_parameters(path: str | Path) -> LoopParameters:
    """The :class:`LoopParameters` a generated loop URDF was made from; SceneError otherwise."""
    path = Path(path)
    try:
        element = ET.parse(path).getroot().find("residualsim_loop")
    except (OSError, ET.ParseError) as exc:
        raise SceneError(f"{path}: cannot read this loop URDF ({exc})") from None
    if element is None:
        raise SceneError(f"{path}: not a residualsim loop URDF (no <residualsim_loop> element)")
    try:
        values = {k: float(v) for k, v in element.attrib.items()}
        values["n_links"] = int(values["n_links"])
        return LoopParameters(**values)
    except (KeyError, TypeError, ValueError) as exc:
        raise SceneError(f"{path}: bad <residualsim_loop> element ({exc})") from None
