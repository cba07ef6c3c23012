"""Op database entries for ferro/ops/device.py."""

from __future__ import annotations

import ferro
from opdb.core import unary

ENTRIES = [
    # The op itself (the public to_device returns x unchanged when it is on the device already).
    unary(
        "to_device",
        lambda x: ferro.ops.registry.apply(ferro.ops.device.ToDevice, x, device="cpu") * 1.0,
        lambda x: x,
    ),
]
