# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""PyTorch's "Reinforcement Learning (DQN) Tutorial" (its gymnasium version), run as one source
with only its import lines changed, on the NumPy cart-pole of test_rl_port.py behind
gymnasium's five-value ``step`` and ``(observation, info)`` ``reset``: the ``Transition``
namedtuple and ``ReplayMemory`` over a ``deque(maxlen=...)`` sampled with ``random.sample``;
``DQN`` (three Linear layers); the device probe through ``torch.backends.mps.is_available()``;
``AdamW(lr=LR, amsgrad=True)``; ``select_action``'s epsilon-greedy choice with
``policy_net(state).max(1).indices.view(1, 1)`` under ``torch.no_grad()`` or
``torch.tensor([[env.action_space.sample()]], device=device, dtype=torch.long)``;
``optimize_model``'s ``Transition(*zip(*transitions))``, a bool mask built with
``torch.tensor(tuple(map(lambda s: s is not None, ...)), dtype=torch.bool)``, ``torch.cat`` of
the non-final states, ``gather(1, action_batch)``, the masked assignment
``next_state_values[non_final_mask] = target_net(...).max(1).values``, ``nn.SmoothL1Loss``,
``torch.nn.utils.clip_grad_value_``; the soft update of the target net through its
``state_dict()`` (``policy_net_state_dict[key]*TAU + target_net_state_dict[key]*(1-TAU)``) and
``load_state_dict``; ``plot_durations``' ``durations_t.unfold(0, 100, 1).mean(1).view(-1)``
(without matplotlib). Fewer episodes and a batch of 32 so that it runs in a test; Python's
``random`` is seeded, so both libraries take the same actions and samples from the same weights.
"""

import random

import numpy as np
import pytest
from test_rl_port import CartPole

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
import ferro.optim as optim
import ferro.nn.functional as F
"""


class CartPoleV1(CartPole):
    """gymnasium's interface: ``reset(seed=)`` gives ``(obs, info)``, ``step`` five values."""

    class action_space:
        n = 2

        @staticmethod
        def sample():
            return random.randrange(2)

    class observation_space:
        shape = (4,)

    def reset(self, seed=None):
        if seed is not None:
            self.seed(seed)
        return super().reset().astype(np.float32), {}

    def step(self, action):
        obs, reward, done, info = super().step(action)
        return obs.astype(np.float32), reward, done and self.t < 200, self.t >= 200, info


class gym:
    @staticmethod
    def make(name):
        return CartPoleV1()


PROGRAM = """
import math
import random
from collections import namedtuple, deque
from itertools import count

env = gym.make("CartPole-v1")

# if GPU is to be used
device = torch.device(
    "cuda" if torch.cuda.is_available() else
    "mps" if torch.backends.mps.is_available() else
    "cpu"
)

random.seed(SEED)
torch.manual_seed(SEED)

Transition = namedtuple('Transition',
                        ('state', 'action', 'next_state', 'reward'))


class ReplayMemory(object):

    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)

    def push(self, *args):
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class DQN(nn.Module):

    def __init__(self, n_observations, n_actions):
        super(DQN, self).__init__()
        self.layer1 = nn.Linear(n_observations, 128)
        self.layer2 = nn.Linear(128, 128)
        self.layer3 = nn.Linear(128, n_actions)

    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


BATCH_SIZE = 32
GAMMA = 0.99
EPS_START = 0.9
EPS_END = 0.01
EPS_DECAY = 2500
TAU = 0.005
LR = 3e-4

n_actions = env.action_space.n
state, info = env.reset(seed=SEED)
n_observations = len(state)

policy_net = DQN(n_observations, n_actions).to(device)
if INIT is not None:
    policy_net.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
target_net = DQN(n_observations, n_actions).to(device)
target_net.load_state_dict(policy_net.state_dict())

optimizer = optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
memory = ReplayMemory(10000)

steps_done = 0


def select_action(state):
    global steps_done
    sample = random.random()
    eps_threshold = EPS_END + (EPS_START - EPS_END) * \\
        math.exp(-1. * steps_done / EPS_DECAY)
    steps_done += 1
    if sample > eps_threshold:
        with torch.no_grad():
            # the index of the larger expected reward
            return policy_net(state).max(1).indices.view(1, 1)
    else:
        return torch.tensor([[env.action_space.sample()]], device=device, dtype=torch.long)


episode_durations = []


def plot_durations(show_result=False):
    durations_t = torch.tensor(episode_durations, dtype=torch.float)
    # 100-episode averages (here over 3)
    if len(durations_t) >= 3:
        means = durations_t.unfold(0, 3, 1).mean(1).view(-1)
        means = torch.cat((torch.zeros(2), means))
        MEANS.append(means.numpy())


def optimize_model():
    if len(memory) < BATCH_SIZE:
        return
    transitions = memory.sample(BATCH_SIZE)
    # batch-array of Transitions to a Transition of batch-arrays
    batch = Transition(*zip(*transitions))

    non_final_mask = torch.tensor(tuple(map(lambda s: s is not None,
                                          batch.next_state)), device=device, dtype=torch.bool)
    non_final_next_states = torch.cat([s for s in batch.next_state
                                                if s is not None])
    state_batch = torch.cat(batch.state)
    action_batch = torch.cat(batch.action)
    reward_batch = torch.cat(batch.reward)

    # Q(s_t, a) of the actions taken
    state_action_values = policy_net(state_batch).gather(1, action_batch)

    # V(s_{t+1}) from the target net, 0 for final states
    next_state_values = torch.zeros(BATCH_SIZE, device=device)
    with torch.no_grad():
        next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
    expected_state_action_values = (next_state_values * GAMMA) + reward_batch

    criterion = nn.SmoothL1Loss()
    loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
    LOSSES.append(loss.item())

    optimizer.zero_grad()
    loss.backward()
    # In-place gradient clipping
    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
    optimizer.step()


if torch.cuda.is_available() or torch.backends.mps.is_available():
    num_episodes = 600
else:
    num_episodes = EPISODES

LOSSES, MEANS = [], []
for i_episode in range(num_episodes):
    state, info = env.reset()
    state = torch.tensor(state, dtype=torch.float32, device=device).unsqueeze(0)
    for t in count():
        action = select_action(state)
        observation, reward, terminated, truncated, _ = env.step(action.item())
        reward = torch.tensor([reward], device=device)
        done = terminated or truncated

        if terminated:
            next_state = None
        else:
            next_state = torch.tensor(observation, dtype=torch.float32, device=device).unsqueeze(0)

        memory.push(state, action, next_state, reward)

        state = next_state

        optimize_model()

        # Soft update of the target network's weights
        # θ′ ← τ θ + (1 −τ )θ′
        target_net_state_dict = target_net.state_dict()
        policy_net_state_dict = policy_net.state_dict()
        for key in policy_net_state_dict:
            target_net_state_dict[key] = policy_net_state_dict[key]*TAU + target_net_state_dict[key]*(1-TAU)
        target_net.load_state_dict(target_net_state_dict)

        if done:
            episode_durations.append(t + 1)
            plot_durations()
            break

print('Complete')
plot_durations(show_result=True)
POLICY = {k: v.detach().numpy().copy() for k, v in policy_net.state_dict().items()}
TARGET = {k: v.detach().numpy().copy() for k, v in target_net.state_dict().items()}
"""


def _run(imports, **params):
    env = {"gym": gym, "SEED": 0, "INIT": None, "EPISODES": 4, **params}
    exec(compile(imports + PROGRAM, "dqn_tutorial_port", "exec"), env)
    return env


def test_the_dqn_tutorial_trains_and_soft_updates_its_target_net():
    start = _run(FERRO_IMPORTS, EPISODES=0)["POLICY"]
    env = _run(FERRO_IMPORTS, INIT=start)
    durations, losses = env["episode_durations"], env["LOSSES"]
    assert len(durations) == 4 and len(losses) == sum(durations) - 31
    assert np.all(np.isfinite(losses))
    # each step moves the target net TAU of the way to the policy net: it has left the start
    # and trails the policy net, nearer to it than the start is.
    policy, target = env["POLICY"], env["TARGET"]
    assert policy.keys() == target.keys() == start.keys()

    def dist(a, b):
        return np.sqrt(sum(float(np.sum((a[k] - b[k]) ** 2)) for k in a))

    assert 0 < dist(target, start) and 0 < dist(target, policy) < dist(start, policy)
    means = env["MEANS"][-1]
    assert means.shape == (4,) and means[-1] == pytest.approx(np.mean(durations[-3:]))


@pytest.mark.torch
def test_the_dqn_tutorial_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, EPISODES=0)["POLICY"]
    ours = _run(FERRO_IMPORTS, INIT=init)
    theirs = _run(TORCH_IMPORTS, INIT=init)
    # Python's random drives the exploration and the replay samples: the same actions.
    assert ours["episode_durations"] == theirs["episode_durations"]
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-4, atol=1e-6)
    for k in init:
        np.testing.assert_allclose(ours["TARGET"][k], theirs["TARGET"][k], rtol=1e-4, atol=1e-6)
