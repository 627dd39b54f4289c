"""The w-x-y-z quaternion helpers against the Hamilton product written out, and their
conventions: shortest rotations, one sign per rotation, continuity, shapes."""

import numpy as np
import pytest

from residualsim.sim.rotations import (as_quat_wxyz, as_rotation, quat_multiply,
                                   quat_relative_rotvec, rotate_by_rotvec, rotvec_to_quat)
from residualsim.sim.scenes.base import quat_wxyz_to_matrix


def _hamilton(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _random_quats(rng, n):
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_product_matches_hamilton_up_to_sign():
    rng = np.random.default_rng(0)
    a, b = _random_quats(rng, 50), _random_quats(rng, 50)
    product = quat_multiply(a, b)
    expected = np.array([_hamilton(x, y) for x, y in zip(a, b)])
    expected *= np.sign(expected[:, :1])
    np.testing.assert_allclose(product, expected, atol=1e-12)
    assert (product[:, 0] >= 0).all()


def test_rotvec_to_quat_rotates_about_the_axis():
    q = rotvec_to_quat(np.array([0.0, 0.0, np.pi / 2]))
    np.testing.assert_allclose(quat_wxyz_to_matrix(q) @ [1.0, 0, 0], [0, 1.0, 0], atol=1e-12)
    assert rotvec_to_quat(np.zeros((2, 5, 3))).shape == (2, 5, 4)


def test_relative_rotvec_is_the_shortest_and_inverts_rotate():
    rng = np.random.default_rng(1)
    q = _random_quats(rng, 40)
    delta = rng.normal(scale=0.8, size=(40, 3))
    delta *= np.minimum(1.0, 3.0 / np.linalg.norm(delta, axis=1, keepdims=True))  # < π
    turned = rotate_by_rotvec(q, delta)
    np.testing.assert_allclose(quat_relative_rotvec(turned, q), delta, atol=1e-9)
    # -q is the same orientation: the relative rotation is zero, not 2π.
    np.testing.assert_allclose(quat_relative_rotvec(-q, q), 0.0, atol=1e-9)


def test_rotate_keeps_each_quaternions_sign():
    q = np.array([[-0.9, 0.1, 0.3, np.sqrt(1 - 0.91)]])
    q /= np.linalg.norm(q)
    turned = rotate_by_rotvec(q, np.array([[0.01, 0.0, 0.0]]))
    assert float(np.sum(turned * q)) > 0.99
    assert turned[0, 0] < 0


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 4)])
def test_round_trip_through_rotation_keeps_the_shape(shape):
    q = _random_quats(np.random.default_rng(2), int(np.prod(shape[:-1]))).reshape(shape)
    back = as_quat_wxyz(as_rotation(q), shape[:-1])
    np.testing.assert_allclose(back, q * np.sign(q[..., :1]), atol=1e-12)
