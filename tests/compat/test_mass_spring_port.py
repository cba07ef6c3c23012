# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples' differentiable_physics/mass_spring.py: a mass-spring simulation trained
through 50 explicit Euler steps, run with only its imports changed: in-place updates of a tensor
in the graph through indexing (``forces[i] += force``, ``forces[:, 1] -= g * m``,
``positions[0] = ...``, ``velocities[0] = torch.tensor(...)``), ``norm()``, ``torch.cat`` of a
constant and a Parameter, ``torch.device("cuda" if torch.cuda.is_available() else "cpu")``.
Three particles and two springs here (upstream's default is one spring), the same start for
both libraries.
"""

import numpy as np
import pytest

PROGRAM = """
class MassSpringSystem(nn.Module):
    def __init__(self, num_particles, springs, mass=1.0, dt=0.01, gravity=9.81, device="cpu"):
        super().__init__()
        self.device = device
        self.mass = mass
        self.springs = springs
        self.dt = dt
        self.gravity = gravity

        # Particle 0 is fixed at the origin
        self.initial_position_0 = torch.tensor([0.0, 0.0], device=device)

        # Remaining particles are trainable
        self.initial_positions_rest = nn.Parameter(torch.randn(num_particles - 1, 2, device=device))

        # Velocities
        self.velocities = torch.zeros(num_particles, 2, device=device)

    def forward(self, steps):
        positions = torch.cat([self.initial_position_0.unsqueeze(0), self.initial_positions_rest], dim=0)
        velocities = self.velocities

        for _ in range(steps):
            forces = torch.zeros_like(positions)

            # Compute spring forces
            for (i, j, rest_length, stiffness) in self.springs:
                xi, xj = positions[i], positions[j]
                dir_vec = xj - xi
                dist = dir_vec.norm()
                force = stiffness * (dist - rest_length) * dir_vec / (dist + 1e-6)
                forces[i] += force
                forces[j] -= force

            # Apply gravity
            forces[:, 1] -= self.gravity * self.mass

            # Semi-implicit Euler integration
            acceleration = forces / self.mass
            velocities = velocities + acceleration * self.dt
            positions = positions + velocities * self.dt

            # Fix particle 0 at origin
            positions[0] = self.initial_position_0
            velocities[0] = torch.tensor([0.0, 0.0], device=positions.device)

        return positions


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
system = MassSpringSystem(num_particles=3, springs=[(0, 1, 1.0, 10.0), (1, 2, 1.0, 10.0)], device=device)
with torch.no_grad():
    system.initial_positions_rest.copy_(torch.tensor(START))
optimizer = optim.Adam(system.parameters(), lr=0.01)
target_positions = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]], device=device)
losses = []
for epoch in range(EPOCHS):
    optimizer.zero_grad()
    final_positions = system(50)
    loss = (final_positions - target_positions).pow(2).mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
rest = system.initial_positions_rest.detach().cpu().numpy()
"""

START = [[0.5, -0.3], [1.2, 0.4]]


def _run(lib, epochs):
    env = {"START": START, "EPOCHS": epochs}
    imports = f"import {lib} as torch\nimport {lib}.nn as nn\nimport {lib}.optim as optim\n"
    exec(compile(imports + PROGRAM, "mass_spring_port", "exec"), env)
    return env


def test_mass_spring_trains_through_the_simulation_on_ferro():
    env = _run("ferro", epochs=30)
    losses = env["losses"]
    assert losses[-1] < 0.75 * losses[0] and all(np.diff(losses) < 0)


@pytest.mark.torch
def test_mass_spring_matches_torch():
    pytest.importorskip("torch")
    ours, theirs = _run("ferro", epochs=20), _run("torch", epochs=20)
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=2e-5)
    np.testing.assert_allclose(ours["rest"], theirs["rest"], rtol=1e-5, atol=1e-6)
