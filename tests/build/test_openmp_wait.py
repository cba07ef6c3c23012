"""Note [OpenMP wait policy] (ferro/_C/__init__.py): ferro loads libgomp with passive waiting,
gives the environment back unchanged, and leaves a user's own setting alone. libgomp prints the
spin count it runs with when OMP_DISPLAY_ENV=VERBOSE, so each case reads it from a fresh
interpreter."""

import os
import re
import subprocess
import sys

import pytest

import ferro

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="libgomp and /proc/self/maps: Linux only"
)

PROBE = (
    "import os, sys\n"
    "before = dict(os.environ)\n"
    "{pre}\n"
    "import ferro\n"
    "assert dict(os.environ) == before, 'ferro changed the environment'\n"
    "print('policy', ferro._C.openmp_wait_policy)\n"
)


def _run(env_extra=(), pre=""):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "FERRO_OMP_PASSIVE")
    }
    env.update(env_extra, OMP_DISPLAY_ENV="VERBOSE")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(pre=pre)],
        env=env,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(ferro.__file__)),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", proc.stderr)
    policy = re.search(r"policy (\w+)", proc.stdout).group(1)
    return policy, spins


def test_ferro_loads_libgomp_passive_and_restores_the_environment():
    policy, spins = _run()
    assert policy == "passive"
    assert spins == ["0"]  # libgomp read OMP_WAIT_POLICY=PASSIVE: it never spins


def test_opt_out_keeps_libgomps_default_spinning():
    policy, spins = _run({"FERRO_OMP_PASSIVE": "0"})
    assert policy == "default"
    assert len(spins) == 1 and int(spins[0]) > 0


@pytest.mark.parametrize(
    "env, spin",
    [({"OMP_WAIT_POLICY": "ACTIVE"}, None), ({"GOMP_SPINCOUNT": "1234"}, "1234")],
)
def test_the_users_setting_wins(env, spin):
    policy, spins = _run(env)
    assert policy == "user"
    assert len(spins) == 1 and spins[0] != "0"
    if spin is not None:
        assert spins == [spin]


def test_a_libgomp_loaded_before_ferro_keeps_its_setting():
    # Load the system libgomp first, as another extension linked to it would.
    pre = "import ctypes\nctypes.CDLL('libgomp.so.1')"
    policy, spins = _run(pre=pre)
    assert policy == "default"
    assert len(spins) == 1 and spins[0] != "0"
